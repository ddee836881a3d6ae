"""Prompt logprobs (SamplingParams.prompt_logprobs, vLLM's name; the OpenAI completions' `echo` with
`logprobs`): the model's raw logprob of each prompt token after the first, from the row before it, with the
top-N alternatives at that position.

A prompt chunk's rows are already computed by its step; this reads them through the LM head, a few hundred
rows at a time (rows x vocabulary float32 logits), for the slots that asked. A step's rows predict the prompt
tokens after them: rows of positions c .. c + n - 1 give the entries of prompt positions c + 1 .. c + n, cut at
the prompt's end (the last prompt row predicts the first output token, which is sampled, not scored here).
A preempted request's resumed prompt covers its outputs too: only the original prompt is scored. An entry is
({id: logprob} of the prompt token and the alternatives, the prompt token's rank: 1 + the tokens more likely),
as vLLM's Logprob carries a rank.
"""

from __future__ import annotations

import torch

from strata.transfer import index_tensor
from strata.types import SamplingParams, ScheduledSlot

HEAD_ROWS = 256  # rows through the LM head at a time: 256 x 152K float32 logits are 155 MB


class PromptLogprobs:
    """The slots whose requests asked for prompt logprobs: their prompt and how many alternatives."""

    def __init__(self) -> None:
        self._slots: dict[int, tuple[int, list[int]]] = {}  # slot -> (top N, prompt token ids)

    def add_slot(self, slot_id: int, params: SamplingParams, prompt_token_ids: list[int]) -> None:
        if params.prompt_logprobs is not None:
            self._slots[slot_id] = (params.prompt_logprobs, list(prompt_token_ids))

    def remove_slot(self, slot_id: int) -> None:
        self._slots.pop(slot_id, None)

    def compute(self, model, hidden: torch.Tensor, scheduled: list[ScheduledSlot],
                query_starts: list[int]) -> dict[int, tuple[int, list[tuple[dict[int, float], int]]]]:
        """hidden [T, D] of the step -> slot -> (prompt position of its first entry, [({id: logprob}, rank)] an
        entry) for the slots that asked and whose rows this step predict prompt tokens."""
        if not self._slots:
            return {}
        wanted = []  # (slot, first position, rows [n], targets [n], top N)
        for work, start in zip(scheduled, query_starts):
            entry = self._slots.get(work.slot_id)
            if entry is None:
                continue
            num_top, prompt = entry
            first, end = work.num_computed_tokens, min(work.num_computed_tokens + work.num_new_tokens, len(prompt) - 1)
            if end > first:  # rows of positions first .. end - 1 predict prompt tokens first + 1 .. end
                rows = list(range(start, start + end - first))
                wanted.append((work.slot_id, first + 1, rows, prompt[first + 1:end + 1], num_top))
        if not wanted:
            return {}
        rows = [row for _, _, slot_rows, _, _ in wanted for row in slot_rows]
        targets = [token for _, _, _, slot_targets, _ in wanted for token in slot_targets]
        num_top = max(n for *_, n in wanted)
        target_lps, ranks, top_lps, top_ids = _score(model, hidden, rows, targets, num_top)
        out, at = {}, 0
        for slot_id, first, slot_rows, slot_targets, n in wanted:
            entries = []
            for i, token in enumerate(slot_targets, start=at):
                entries.append(({**dict(zip(top_ids[i][:n], top_lps[i][:n])), token: target_lps[i]}, ranks[i]))
            out[slot_id] = (first, entries)
            at += len(slot_rows)
        return out


def _score(model, hidden: torch.Tensor, rows: list[int], targets: list[int], num_top: int
           ) -> tuple[list[float], list[int], list[list[float]], list[list[int]]]:
    """The LM head's log_softmax at `rows` of hidden [T, D]: each row's logprob of its target and the target's rank
    (1 + the tokens with a larger logprob), and its num_top most likely tokens' logprobs and ids (lists, a row each)."""
    target_lps, ranks, top_lps, top_ids = [], [], [], []
    for at in range(0, len(rows), HEAD_ROWS):
        index = index_tensor(rows[at:at + HEAD_ROWS], hidden.device)
        logprobs = model.compute_logits(hidden[index]).float().log_softmax(dim=-1)       # [R, V]
        target = index_tensor(targets[at:at + HEAD_ROWS], hidden.device)
        target_lp = logprobs.gather(1, target.unsqueeze(1))                            # [R, 1]
        target_lps += target_lp.squeeze(1).tolist()
        ranks += ((logprobs > target_lp).sum(dim=1) + 1).tolist()                      # [R]
        if num_top:
            values, ids = logprobs.topk(min(num_top, logprobs.shape[1]), dim=-1)      # [R, N]
            top_lps += values.tolist()
            top_ids += ids.tolist()
        else:
            top_lps += [[] for _ in range(index.shape[0])]
            top_ids += [[] for _ in range(index.shape[0])]
    return target_lps, ranks, top_lps, top_ids
