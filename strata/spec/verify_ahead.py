"""Verification steps planned ahead (--async-scheduling with synthetic drafts): a step's verdicts stay on the
device, so the next step can be queued before the host reads them.

The scheduler plans step N + 1 while N runs, as if N accepted all its drafts. N's verdicts (each slot's
accepted count and the target's token after them, the bonus) are computed on the device; N + 1's windows
start at that bonus token (fed on the device) and are moved back by N's shortfall, accepted - drafts
(GraphInputs.shift); a model with recurrent state gets each slot's state at its last accepted token back with
device indices. The host reads N's tokens while N + 1 runs and commits them one step behind.

Synthetic drafting (spec/synthetic.py) decides how many drafts a step accepts when it is launched: its draft
rows are placeholders (the bonus token repeated, as the proposer's are) and the accepted tokens are the
target's own at those rows, so the verdicts need nothing but the target's argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata.kernels.argmax import argmax
from strata.spec.commit import restore_rows
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

    def shortfall(self, slot_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """For the slots `slot_ids` of the next step -> (bonus tokens [R], accepted - drafts [R]) on the device."""
        drafts = self.plan.scheduled[0].num_new_tokens - 1
        if slot_ids == self.slot_ids:
            return self.bonus, self.accepted - drafts
        row_of = {slot_id: row for row, slot_id in enumerate(self.slot_ids)}
        rows = index_tensor([row_of[s] for s in slot_ids], self.bonus.device)
        return self.bonus[rows], self.accepted[rows] - drafts


def synthetic_verdicts(logits: torch.Tensor, num_slots: int, window: int, accepted: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [S * n, V] of S windows of n rows, accepted [S] -> (the target's tokens [S, n], bonus [S]): a slot
    that accepts a drafts emits tokens[:a + 1], the last of them the bonus."""
    tokens = argmax(logits).view(num_slots, window)                                     # [S, n]
    return tokens, tokens.gather(1, accepted.unsqueeze(1)).squeeze(1)


def roll_back_states(state_caches: dict, window_states: dict, slot_ids: list[int], window: int,
                     accepted: torch.Tensor) -> None:
    """Each slot's recurrent state := the one recorded after its last accepted token (row i * n + accepted)."""
    rows = torch.arange(len(slot_ids), device=accepted.device) * window + accepted                # [S]
    restore_rows(state_caches, window_states, index_tensor(slot_ids, accepted.device), rows)
