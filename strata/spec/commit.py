"""Commit: the only place recurrent state is restored after verification.

The verify pass left every slot's pool row at the state after the *last* token of its window and
recorded the state after each token (ForwardContext.window_states). A slot that accepted only part
of its drafts gets the state after its last accepted token copied back into its row. KV needs no
work: rejected positions are overwritten by later steps, and lengths live in the scheduler.
"""

from __future__ import annotations

import torch


def restore_recurrent_state(state_caches: dict[int, tuple[torch.Tensor, torch.Tensor]],
                            window_states: dict[int, tuple[torch.Tensor, torch.Tensor]],
                            slot_ids: list[int], token_rows: list[int]) -> None:
    """For each (slot, token row): pool row `slot` := state recorded after token `token_row`."""
    if not slot_ids:
        return
    device = next(iter(state_caches.values()))[0].device
    slots = torch.tensor(slot_ids, device=device)
    rows = torch.tensor(token_rows, device=device)
    for layer, (conv_state, ssm_state) in state_caches.items():
        window_conv, window_ssm = window_states[layer]
        conv_state.index_copy_(0, slots, window_conv[rows])
        ssm_state.index_copy_(0, slots, window_ssm[rows])
