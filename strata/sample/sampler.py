"""The Sampler: per-slot sampling state and one call that turns a step's logits into token ids.

It owns each slot's parameters (persistent [S] tensors), penalty statistics, min_tokens masking,
logit bias and grammar constraints (constraints.py), reasoning budgets (a spent budget forces `</think>`:
that row's logits become one-hot, strata/reasoning.py), and random generators; it does not decide when a
request stops. A seeded request's generator is reseeded at every output position from (seed, position), so
its tokens depend only on its own seed and history: not on the batch it shares, nor on whether it was preempted and
resumed, nor on speculation (its verification windows draw each position's token as decoding would there:
sample_seeded_positions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata.kernels.argmax import argmax
from strata.reasoning import ThinkingBudget, ThinkingTokens
from strata.sample.constraints import Constraints, Window
from strata.sample.penalties import PenaltyState
from strata.sample.probs import processed_probs, sample_from_probs, sample_seeded_rows
from strata.transfer import index_tensor
from strata.types import SamplingParams

_MASK64 = (1 << 64) - 1


@dataclass
class SamplerOutput:
    token_ids: list[int]                          # one per row
    logprobs: list[dict[int, float] | None]       # per row: sampled + top-N ids -> raw logprob, or None


def position_seed(seed: int, position: int) -> int:
    """splitmix64 of (seed, position): nearby seeds and positions give unrelated streams."""
    z = ((seed & _MASK64) + (position + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class Sampler:
    def __init__(self, max_num_seqs: int, vocab_size: int, eos_token_ids: list[int],
                 device: torch.device | str = "cpu", seed: int | None = None):
        self.vocab_size = vocab_size
        self.eos_token_ids = list(eos_token_ids)
        self.device = torch.device(device)
        self.params: list[SamplingParams | None] = [None] * max_num_seqs
        self.num_output_tokens = [0] * max_num_seqs
        self.min_tokens_stop_ids: list[list[int]] = [[] for _ in range(max_num_seqs)]
        self.temperature = torch.ones(max_num_seqs, device=self.device)
        self.top_k = torch.zeros(max_num_seqs, dtype=torch.int64, device=self.device)
        self.top_p = torch.ones(max_num_seqs, device=self.device)
        self.min_p = torch.zeros(max_num_seqs, device=self.device)
        self.penalties = PenaltyState(max_num_seqs, vocab_size, self.device)
        self.constraints = Constraints(max_num_seqs, vocab_size)
        self.thinking_tokens: ThinkingTokens | None = None  # set by the engine from its tokenizer
        self.thinking: list[ThinkingBudget | None] = [None] * max_num_seqs
        self.slot_generators = [torch.Generator(device=self.device) for _ in range(max_num_seqs)]
        # Unseeded rows share one generator; `seed` (the runner's config seed) makes them repeatable.
        self.shared_generator = torch.Generator(device=self.device)
        if seed is None:
            self.shared_generator.seed()
        else:
            self.shared_generator.manual_seed(seed)

    def add_slot(self, slot_id: int, params: SamplingParams, prompt_token_ids: list[int],
                 output_token_ids: list[int] | None = None) -> None:
        """A request enters `slot_id`; output_token_ids is non-empty when a preempted request resumes."""
        output_token_ids = list(output_token_ids or [])
        self.params[slot_id] = params
        self.num_output_tokens[slot_id] = len(output_token_ids)
        # A stop id outside the vocabulary can never be drawn, so there is nothing to mask.
        stop_ids = self.eos_token_ids + list(params.stop_token_ids or [])
        self.min_tokens_stop_ids[slot_id] = [t for t in stop_ids if 0 <= t < self.vocab_size]
        self.temperature[slot_id] = params.temperature
        self.top_k[slot_id] = params.top_k
        self.top_p[slot_id] = params.top_p
        self.min_p[slot_id] = params.min_p
        self.penalties.add_slot(slot_id, params, prompt_token_ids, output_token_ids)
        self.constraints.add_slot(slot_id, params, output_token_ids)
        self.thinking[slot_id] = None
        if params.thinking_budget is not None:
            if self.thinking_tokens is None:
                raise ValueError("a thinking budget needs a model with <think> and </think> tokens")
            self.thinking[slot_id] = ThinkingBudget.start(self.thinking_tokens, params.thinking_budget,
                                                          prompt_token_ids, output_token_ids)

    def remove_slot(self, slot_id: int) -> None:
        self.params[slot_id] = None
        self.constraints.remove_slot(slot_id)
        self.thinking[slot_id] = None

    def append_output(self, slot_id: int, token_ids: list[int]) -> None:
        """Committed generated tokens: they feed the penalties, min_tokens and the seed position."""
        self._params_of(slot_id)  # raises for an empty slot instead of corrupting the next request's state
        self.num_output_tokens[slot_id] += len(token_ids)
        self.penalties.add_outputs(slot_id, token_ids)
        self.constraints.advance(slot_id, token_ids)
        if self.thinking[slot_id] is not None:
            for token_id in token_ids:
                self.thinking[slot_id].advance(token_id)

    def sample(self, logits: torch.Tensor, slot_ids: list[int]) -> SamplerOutput:
        """logits [N, V] float32, row i for slot_ids[i] -> one token (and optional logprobs) per row."""
        if not slot_ids:
            self._check_rows(logits, slot_ids)
            return SamplerOutput([], [])
        token_id_list = self.sample_on_device(logits, slot_ids).tolist()
        params = [self._params_of(slot_id) for slot_id in slot_ids]
        return SamplerOutput(token_id_list, self._logprobs(logits, params, token_id_list))

    def sample_on_device(self, logits: torch.Tensor, slot_ids: list[int]) -> torch.Tensor:
        """sample() without reading the tokens back: -> token ids [N] int64 on the logits' device (the
        caller reads them, or feeds them to the next step). logits are left unchanged."""
        self._check_rows(logits, slot_ids)
        params = [self._params_of(slot_id) for slot_id in slot_ids]
        logits = self.penalties.apply(logits, slot_ids)
        logits = self._mask_min_tokens(logits, slot_ids)
        windows = [(slot_id, row, []) for row, slot_id in enumerate(slot_ids)]
        logits = self._force_thinking(self.constraints.apply(logits, windows), windows)
        sampled_rows = [row for row, p in enumerate(params) if not p.is_greedy]
        if len(sampled_rows) == len(slot_ids):
            return self._sample_rows(logits, slot_ids, sampled_rows)
        token_ids = argmax(logits)                                    # [N], exact for greedy rows
        if sampled_rows:  # index copies that do not wait: the step they follow may still be running
            token_ids[index_tensor(sampled_rows, token_ids.device)] = self._sample_rows(logits, slot_ids, sampled_rows)
        return token_ids

    def _check_rows(self, logits: torch.Tensor, slot_ids: list[int]) -> None:
        if logits.shape != (len(slot_ids), self.vocab_size):
            raise ValueError(f"logits have shape {tuple(logits.shape)}; expected "
                             f"({len(slot_ids)}, {self.vocab_size}): one row per slot in slot_ids")

    def prepare_constraints(self, windows: list[Window]) -> None:
        """Compute the grammar masks these windows will need now (see Constraints.prepare): call it before
        anything waits for the step's forward."""
        self.constraints.prepare(windows, self.device)

    def constrain_windows(self, logits: torch.Tensor, windows: list[Window]) -> torch.Tensor:
        """Verification windows' logits [R, V] with each slot's logit bias and grammar masks (one per row,
        the grammar walking the slot's drafts) applied, and the tokens a spent reasoning budget forces; rows
        of other slots are left as they are."""
        return self._force_thinking(self.constraints.apply(logits, windows), windows)

    def _force_thinking(self, logits: torch.Tensor, windows: list[Window]) -> torch.Tensor:
        """Rows where a slot's reasoning budget forces a token become -inf but that token (0): after any
        bias, grammar mask or filter the token is the only one left, greedy or sampled, and a draft that is
        not it is rejected like any other. Rows where it bans <think> get -inf there. Only those rows change
        (a new tensor if any do)."""
        forced_rows, forced_ids, banned_rows, banned_ids = [], [], [], []
        for slot_id, first, drafts in windows:
            budget = self.thinking[slot_id]
            if budget is None:
                continue
            for j, (force, ban) in enumerate(budget.rules_along(drafts)):
                if force is not None:
                    forced_rows.append(first + j)
                    forced_ids.append(force)
                if ban is not None:
                    banned_rows.append(first + j)
                    banned_ids.append(ban)
        if banned_rows:
            index = (index_tensor(banned_rows, logits.device), index_tensor(banned_ids, logits.device))
            logits = logits.index_put(index, torch.full((), float("-inf"), dtype=logits.dtype, device=logits.device))
        if forced_rows:
            rows_t = index_tensor(forced_rows, logits.device)
            logits = logits.index_fill(0, rows_t, float("-inf"))
            logits = logits.index_put((rows_t, index_tensor(forced_ids, logits.device)),
                                      torch.zeros((), dtype=logits.dtype, device=logits.device))
        return logits

    def window_probs(self, logits: torch.Tensor, row_slot_ids: list[int]) -> torch.Tensor:
        """The target distribution of every row of verification windows: logits [R, V] -> probs [R, V],
        row r processed with the parameters of slot row_slot_ids[r]. No penalties or min_tokens mask:
        the scheduler drafts only for requests that use neither (logit bias and grammars: see
        constrain_windows, applied before)."""
        slots = index_tensor(row_slot_ids, self.device)
        params = [self._params_of(slot_id) for slot_id in set(row_slot_ids)]
        return processed_probs(
            logits, self.temperature[slots],
            top_k=self.top_k[slots] if any(0 < p.top_k < self.vocab_size for p in params) else None,
            top_p=self.top_p[slots] if any(p.top_p < 1.0 for p in params) else None,
            min_p=self.min_p[slots] if any(p.min_p > 0.0 for p in params) else None)

    def generator_for(self, slot_id: int) -> torch.Generator | None:
        """The slot's generator reseeded for its next output position (None: use the shared one)."""
        params = self._params_of(slot_id)
        if params.seed is None:
            return None
        generator = self.slot_generators[slot_id]
        generator.manual_seed(position_seed(params.seed, self.num_output_tokens[slot_id]))
        return generator

    def sample_seeded_positions(self, probs: torch.Tensor, row_slot_ids: list[int],
                                offsets: list[int]) -> torch.Tensor:
        """Seeded slots' tokens at output positions ahead of their last committed one: probs [R, V] (processed),
        row r the slot row_slot_ids[r]'s distribution `offsets[r]` positions ahead -> [R] int64, each drawn with the
        noise sample() draws at that position. Verification windows so emit what plain decoding would: a seeded
        request's tokens do not depend on its drafts."""
        seeds = [position_seed(self._params_of(slot_id).seed, self.num_output_tokens[slot_id] + offset)
                 for slot_id, offset in zip(row_slot_ids, offsets)]
        return sample_seeded_rows(probs, self.slot_generators[row_slot_ids[0]], seeds)

    def _params_of(self, slot_id: int) -> SamplingParams:
        params = self.params[slot_id]
        if params is None:
            raise KeyError(f"slot {slot_id} holds no request; call add_slot before using it")
        return params

    def _mask_min_tokens(self, logits: torch.Tensor, slot_ids: list[int]) -> torch.Tensor:
        """EOS and stop token ids get -inf while a request has fewer than min_tokens outputs."""
        rows, cols = [], []
        for row, slot_id in enumerate(slot_ids):
            # a grammar decides itself when the output may end (it allows EOS only when complete)
            if self.num_output_tokens[slot_id] < self.params[slot_id].min_tokens \
                    and not self.constraints.has_grammar(slot_id):
                stop_ids = self.min_tokens_stop_ids[slot_id]
                rows += [row] * len(stop_ids)
                cols += stop_ids
        if not rows:
            return logits
        index = (index_tensor(rows, logits.device), index_tensor(cols, logits.device))
        return logits.index_put(index, torch.full((), float("-inf"), device=logits.device))

    def _sample_rows(self, logits: torch.Tensor, slot_ids: list[int], rows: list[int]) -> torch.Tensor:
        """Draw tokens for logits[rows] (non-greedy rows) -> [len(rows)] int64."""
        row_slot_ids = [slot_ids[row] for row in rows]
        row_params = [self.params[slot_id] for slot_id in row_slot_ids]
        slots = index_tensor(row_slot_ids, self.device)
        if len(rows) < logits.shape[0]:
            logits = logits[index_tensor(rows, logits.device)]
        # Filters no row needs are skipped: top_k and top_p each cost a sort (or topk) over V.
        needs_top_k = any(0 < p.top_k < self.vocab_size for p in row_params)
        needs_top_p = any(p.top_p < 1.0 for p in row_params)
        needs_min_p = any(p.min_p > 0.0 for p in row_params)
        top_k_max = max((p.top_k if 0 < p.top_k < self.vocab_size else 1) for p in row_params)
        probs = processed_probs(logits, self.temperature[slots],
                                top_k=self.top_k[slots] if needs_top_k else None,
                                top_p=self.top_p[slots] if needs_top_p else None,
                                min_p=self.min_p[slots] if needs_min_p else None, top_k_max=top_k_max)
        generators = {i: g for i, slot_id in enumerate(row_slot_ids) if (g := self.generator_for(slot_id))}
        return sample_from_probs(probs, generators, self.shared_generator)

    def _logprobs(self, raw_logits: torch.Tensor, params: list[SamplingParams],
                  token_ids: list[int]) -> list[dict[int, float] | None]:
        """vLLM's default (raw) logprobs: log_softmax of the logits before penalties and filters."""
        rows = [row for row, p in enumerate(params) if p.logprobs is not None]
        logprobs: list[dict[int, float] | None] = [None] * len(params)
        if not rows:
            return logprobs
        rows_t = torch.tensor(rows, device=raw_logits.device)
        row_logprobs = raw_logits[rows_t].float().log_softmax(dim=-1)  # [R, V]
        sampled = torch.tensor([token_ids[row] for row in rows], device=raw_logits.device)
        sampled_lp = row_logprobs.gather(1, sampled.unsqueeze(1)).squeeze(1).tolist()
        num_top = min(max(params[row].logprobs for row in rows), self.vocab_size)
        top_lp, top_ids = row_logprobs.topk(num_top, dim=-1)          # [R, num_top]
        top_lp, top_ids = top_lp.tolist(), top_ids.tolist()
        for i, row in enumerate(rows):
            n = params[row].logprobs
            logprobs[row] = {token_ids[row]: sampled_lp[i], **dict(zip(top_ids[i][:n], top_lp[i][:n]))}
        return logprobs
