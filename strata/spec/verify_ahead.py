"""Verification steps planned ahead (--async-scheduling with synthetic drafts): a step's verdicts stay on the
device, so the next step can be queued before the host reads them.

The scheduler plans step N + 1 while N runs, as if N accepted all its drafts. N's verdicts (each slot's
accepted count and the target's token after them, the bonus) are computed on the device; N + 1's windows
start at that bonus token (fed on the device) and are moved back by N's shortfall, accepted - drafts
(GraphInputs.shift); a model with recurrent state gets each slot's state at its last accepted token back with
device indices. The host reads N's tokens while N + 1 runs and commits them one step behind.

Synthetic drafting (spec/synthetic.py) decides how many drafts a step accepts when it is launched: its draft
rows are placeholders (the bonus token repeated, as the proposer's are) and the accepted tokens are the
target's own at those rows, so the verdicts need nothing but the target's argmax. MTP and suffix drafting
(STRATA_DRAFTS_AHEAD=1 until their speed is measured): a greedy slot accepts the drafts equal to the target's
argmax, a sampled one runs speculative sampling on the device (the shared generator: no per-request seed). The
MTP head drafts the next window on the device, from the step's rows (pass 1) and from one-token contexts moved
back by the same shortfall (passes 2..k). Suffix drafts are the host's, made when the next step is launched as
if the step in flight accepted all its drafts (its bonus token guessed as the match's next token): a window
after one that rejected some verifies drafts that rarely fit, which the acceptance (and the draft policy) shows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from strata.kernels.argmax import argmax
from strata.kernels.state_rollback import restore_all_accepted
from strata.sample.probs import sample_from_probs
from strata.transfer import index_tensor
from strata.types import StepPlan


@dataclass
class VerifyInFlight:
    """A verification step launched by ModelRunner.launch_verify whose verdicts the host has not read."""

    plan: StepPlan
    slot_ids: list[int]                  # plan order
    tokens: torch.Tensor                 # [S, n] the target's token at every window row (device)
    accepted: torch.Tensor               # [S] int64 drafts accepted (device)
    bonus: torch.Tensor                  # [S] the token after them: the next window's first input (device)
    host_tokens: torch.Tensor            # [S, n] and [S]: their copies in host memory
    host_accepted: torch.Tensor
    copied: torch.cuda.Event | None      # recorded after those copies (CUDA)
    expert_pairs: dict
    started: float
    launched: float
    drafts: torch.Tensor | None = None   # [S, k'] the next window's drafts (MTP, device), else placeholders
    host_drafts: torch.Tensor | None = None
    verified: list[list[int]] | None = None  # the drafts this step verifies, where the host made them (suffix)

    def next_inputs(self, slot_ids: list[int], window: int, drafts: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """For the slots `slot_ids` of the next step (windows of `window` rows) -> (its input ids [R * window]: the
        bonus token, then the drafts: `drafts` [R, window - 1], this step's MTP drafts, or the bonus again as
        placeholders; accepted - drafts [R]) on the device."""
        k = self.plan.scheduled[0].num_new_tokens - 1
        rows = None
        if slot_ids != self.slot_ids:
            row_of = {slot_id: row for row, slot_id in enumerate(self.slot_ids)}
            rows = index_tensor([row_of[s] for s in slot_ids], self.bonus.device)
        bonus, accepted = (self.bonus, self.accepted) if rows is None else (self.bonus[rows], self.accepted[rows])
        if drafts is None and self.drafts is not None:
            drafts = (self.drafts if rows is None else self.drafts[rows])[:, :window - 1]
        if drafts is None:
            return bonus.repeat_interleave(window), accepted - k
        return torch.cat((bonus.unsqueeze(1), drafts), dim=1).flatten(), accepted - k

    def verified_by_slot(self) -> dict[int, list[int]]:
        return dict(zip(self.slot_ids, self.verified or [[] for _ in self.slot_ids]))


def synthetic_verdicts(logits: torch.Tensor, num_slots: int, window: int, accepted: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [S * n, V] of S windows of n rows, accepted [S] -> (the target's tokens [S, n], bonus [S]): a slot
    that accepts a drafts emits tokens[:a + 1], the last of them the bonus."""
    tokens = argmax(logits).view(num_slots, window)                                     # [S, n]
    return tokens, tokens.gather(1, accepted.unsqueeze(1)).squeeze(1)


def greedy_verdicts(logits: torch.Tensor, num_slots: int, window: int, drafts: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [S * n, V], drafts [S, n - 1] on the device -> (the target's tokens [S, n], accepted [S]: the drafts
    equal to the target's argmax before the first that is not, bonus [S]: the argmax after them)."""
    tokens = argmax(logits).view(num_slots, window)                                     # [S, n]
    accepted = (drafts == tokens[:, :-1]).long().cumprod(dim=1).sum(dim=1)              # [S]
    return tokens, accepted, tokens.gather(1, accepted.unsqueeze(1)).squeeze(1)


def sampled_verdicts(probs: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator | None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Speculative sampling on the device (spec/verify.py's verify_rejection for a deterministic drafter and
    the shared generator, drawing the same numbers in the same order): probs [S * n, V] the windows' processed
    target distributions, drafts [S, k] -> (emitted tokens [S, n]: accepted drafts then the final token, accepted
    [S], the final token [S]: the residual's draw at the first rejected draft, else p's at the last row)."""
    num_slots, k = drafts.shape
    p = probs.view(num_slots, k + 1, -1)                                                   # [S, n, V]
    p_draft = p[:, :k].gather(2, drafts.unsqueeze(2)).squeeze(2)                         # [S, k]
    uniforms = torch.rand(num_slots * k, generator=generator, device=probs.device).view(num_slots, k)
    accepted = (uniforms < p_draft).long().cumprod(dim=1).sum(dim=1)                     # [S]
    p_final = p.gather(1, accepted.view(-1, 1, 1).expand(-1, 1, p.shape[2])).squeeze(1)  # [S, V]
    rejected_ids = drafts.gather(1, accepted.clamp(max=k - 1).unsqueeze(1))              # [S, 1]
    residual = p_final.scatter(1, rejected_ids, 0.0)
    use_residual = (accepted < k) & (residual.sum(dim=1) > 0)   # (zero mass only by rounding: p is the answer)
    final = sample_from_probs(torch.where(use_residual.unsqueeze(1), residual, p_final), None, generator)
    emitted = torch.cat((drafts, final.unsqueeze(1)), dim=1).scatter_(1, accepted.unsqueeze(1), final.unsqueeze(1))
    return emitted, accepted, final


def moved_windows(positions: torch.Tensor, seq_lens: torch.Tensor, block_tables: torch.Tensor, delta: torch.Tensor,
                  block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Windows of n rows each moved by delta [R] positions on the device: positions [R * n], seq_lens [R] and the
    block tables [>= R, W] (already holding the unmoved windows' blocks, which end at or past the moved ones) ->
    (positions, seq_lens, KV slot mapping [R * n])."""
    n = positions.shape[0] // delta.shape[0]
    positions = positions + delta.repeat_interleave(n)                                     # [R * n]
    rows = torch.arange(delta.shape[0], device=delta.device).repeat_interleave(n)
    columns = (positions // block_size).clamp(max=block_tables.shape[1] - 1)
    return positions, seq_lens + delta, block_tables[rows, columns] * block_size + positions % block_size


def shift_context(ctx, delta: torch.Tensor):
    """An eager step's context (runner/inputs.py) with each sequence moved by delta [S] positions on the device
    (as GraphInputs.shift does for a graph's). The host copies of the lengths follow only where the device is the
    host (the CPU); on a GPU they keep the planned ones, which the kernels of short windows do not read."""
    positions, seq_lens, slot_mapping = moved_windows(ctx.positions, ctx.seq_lens, ctx.block_tables, delta,
                                                      ctx.block_size)
    num_computed = ctx.num_computed
    if delta.device.type == "cpu":
        num_computed = tuple(c + d for c, d in zip(ctx.num_computed, delta.tolist()))
    return dataclasses.replace(ctx, positions=positions, slot_mapping=slot_mapping, seq_lens=seq_lens,
                               num_computed=num_computed)


def roll_back_states(state_caches: dict, window_states: dict, slots: torch.Tensor, window: int,
                     accepted: torch.Tensor) -> None:
    """Each slot's recurrent state := the one recorded after its last accepted token (row i * n + accepted), for
    the slots that rejected a draft (the others' pool rows hold it already); slots [S] int64 their state rows,
    on the device. Every layer's tensors in one launch on CUDA."""
    pairs = [pair for layer, pools in state_caches.items() for pair in zip(window_states[layer], pools)]
    restore_all_accepted(pairs, slots, accepted, window)
