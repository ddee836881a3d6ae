"""Commit: the only place recurrent state is restored after verification, and where accepted
tokens join the sampler's and the drafter's history.

The verify pass left every slot's pool row at the state after the *last* token of its window and
recorded the state after each token (ForwardContext.window_states; on CUDA all but the window's last, which
no roll-back reads). A slot that accepted only part of its drafts gets the state after its last accepted
token copied back into its row (here; planned steps on the device: verify_ahead.roll_back_states). KV needs
no work: rejected positions are overwritten by later steps, and lengths live in the scheduler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from strata.kernels.state_rollback import restore_all_rows
from strata.spec.verify_step import SlotOutcome
from strata.transfer import index_tensor

if TYPE_CHECKING:
    from strata.sample import Sampler
    from strata.spec.proposer import Proposer


def restore_recurrent_state(state_caches: dict[int, tuple[torch.Tensor, torch.Tensor]],
                            window_states: dict[int, tuple[torch.Tensor, torch.Tensor]],
                            slot_ids: list[int], token_rows: list[int]) -> None:
    """For each (slot, token row): pool row `slot` := state recorded after token `token_row` (every layer's tensors
    in one launch on CUDA)."""
    if not slot_ids:
        return
    device = next(iter(state_caches.values()))[0].device
    pairs = [pair for layer, pools in state_caches.items() for pair in zip(window_states[layer], pools)]
    restore_all_rows(pairs, index_tensor(slot_ids, device), index_tensor(token_rows, device))


def commit_outcomes(outcomes: list[SlotOutcome], sampler: Sampler, drafter: Proposer | None,
                    state_caches: dict[int, tuple[torch.Tensor, torch.Tensor]],
                    window_states: dict[int, tuple[torch.Tensor, torch.Tensor]] | None) -> None:
    """After verification: slots that rejected some drafts get the recurrent state of their last
    accepted position back (`window_states`: what the step recorded, None when it verified nothing on
    a model with recurrent state); every slot's accepted tokens join its sampling and drafting history."""
    if window_states is not None:
        partial = [o for o in outcomes if o.num_accepted < o.num_drafts]
        restore_recurrent_state(state_caches, window_states, [o.slot_id for o in partial],
                                [o.last_row for o in partial])
    for o in outcomes:
        sampler.append_output(o.slot_id, o.token_ids)
        if drafter is not None:
            drafter.commit(o.slot_id, o.token_ids)
