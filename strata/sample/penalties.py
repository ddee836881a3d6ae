"""Repetition, presence and frequency penalties, and the per-slot token statistics they read.

Repetition (HF/vLLM) covers prompt + output tokens; presence and frequency (OpenAI) cover output
tokens only. The statistics live in persistent [S, V] buffers written only for slots whose
request has a penalty, so unpenalised traffic costs nothing here.
"""

from __future__ import annotations

import torch

from strata.transfer import index_tensor
from strata.types import SamplingParams


def has_penalties(params: SamplingParams) -> bool:
    return (params.repetition_penalty != 1.0 or params.presence_penalty != 0.0
            or params.frequency_penalty != 0.0)


def apply_penalties(logits: torch.Tensor, output_counts: torch.Tensor, prompt_mask: torch.Tensor,
                    repetition_penalty: torch.Tensor, presence_penalty: torch.Tensor,
                    frequency_penalty: torch.Tensor) -> torch.Tensor:
    """logits [N, V], output_counts [N, V] int, prompt_mask [N, V] bool, penalties [N] -> [N, V].

    Seen tokens: positive logits are divided by the repetition penalty, others multiplied (so a
    penalty > 1 always lowers them); then logit -= frequency * count + presence * (count > 0).
    """
    output_mask = output_counts > 0                                   # [N, V]
    repetition = torch.where(prompt_mask | output_mask, repetition_penalty.unsqueeze(1), 1.0)
    logits = torch.where(logits > 0, logits / repetition, logits * repetition)
    return (logits - frequency_penalty.unsqueeze(1) * output_counts
            - presence_penalty.unsqueeze(1) * output_mask)


class PenaltyState:
    """Per-slot penalty parameters [S] and token statistics (prompt mask, output counts) [S, V]."""

    def __init__(self, max_num_seqs: int, vocab_size: int, device: torch.device):
        self.device = device
        self.is_enabled = [False] * max_num_seqs
        self.repetition_penalty = torch.ones(max_num_seqs, device=device)
        self.presence_penalty = torch.zeros(max_num_seqs, device=device)
        self.frequency_penalty = torch.zeros(max_num_seqs, device=device)
        self.output_counts = torch.zeros((max_num_seqs, vocab_size), dtype=torch.int32, device=device)
        self.prompt_mask = torch.zeros((max_num_seqs, vocab_size), dtype=torch.bool, device=device)

    def add_slot(self, slot_id: int, params: SamplingParams, prompt_token_ids: list[int],
                 output_token_ids: list[int]) -> None:
        self.is_enabled[slot_id] = has_penalties(params)
        if not self.is_enabled[slot_id]:
            return
        self.repetition_penalty[slot_id] = params.repetition_penalty
        self.presence_penalty[slot_id] = params.presence_penalty
        self.frequency_penalty[slot_id] = params.frequency_penalty
        self.prompt_mask[slot_id] = False
        self.prompt_mask[slot_id, self._ids(prompt_token_ids)] = True
        self.output_counts[slot_id] = 0
        self.add_outputs(slot_id, output_token_ids)

    def add_outputs(self, slot_id: int, token_ids: list[int]) -> None:
        if not self.is_enabled[slot_id]:
            return
        ids = self._ids(token_ids)
        # accumulate=True: a token repeated within one call is counted every time.
        self.output_counts[slot_id].index_put_((ids,), torch.ones_like(ids, dtype=torch.int32),
                                               accumulate=True)

    def apply(self, logits: torch.Tensor, slot_ids: list[int]) -> torch.Tensor:
        """Penalise the rows of logits [N, V] (row i belongs to slot_ids[i]) whose slot has penalties;
        the other rows are returned untouched, and so is the input tensor."""
        rows = [row for row, slot_id in enumerate(slot_ids) if self.is_enabled[slot_id]]
        if not rows:
            return logits
        rows_t = self._ids(rows)
        slots_t = self._ids([slot_ids[row] for row in rows])
        penalised = apply_penalties(logits[rows_t], self.output_counts[slots_t], self.prompt_mask[slots_t],
                                    self.repetition_penalty[slots_t], self.presence_penalty[slots_t],
                                    self.frequency_penalty[slots_t])
        return logits.index_put((rows_t,), penalised)

    def _ids(self, ids: list[int]) -> torch.Tensor:
        return index_tensor(ids, self.device)
