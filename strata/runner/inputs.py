"""Turns the scheduled slots of a plan into the flat token batch and the ForwardContext."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from strata.model.context import ForwardContext
from strata.types import ScheduledSlot


@dataclass
class StepInputs:
    input_ids: torch.Tensor        # [T]
    ctx: ForwardContext
    query_starts: list[int]        # first token row of each scheduled slot


def build_inputs(scheduled: list[ScheduledSlot], block_tables: dict[int, list[int]], block_size: int,
                 kv_caches: dict, state_caches: dict, device: str, split_table_width: int = 0) -> StepInputs:
    """`split_table_width`: the attention kernel splits each context as if block tables had this many
    columns (the CUDA graphs' width), so eager and graph steps of one layout round alike."""
    input_ids: list[int] = []
    positions: list[np.ndarray] = []
    slot_mapping: list[np.ndarray] = []
    query_start_loc = [0]
    for work in scheduled:
        table = np.asarray(block_tables[work.slot_id], dtype=np.int64)
        pos = np.arange(work.num_computed_tokens, work.num_computed_tokens + work.num_new_tokens)
        positions.append(pos)
        slot_mapping.append(table[pos // block_size] * block_size + pos % block_size)
        input_ids.extend(work.token_ids)
        query_start_loc.append(query_start_loc[-1] + work.num_new_tokens)
    width = max(len(block_tables[w.slot_id]) for w in scheduled)
    padded = [block_tables[w.slot_id] + [0] * (width - len(block_tables[w.slot_id])) for w in scheduled]
    num_computed = [w.num_computed_tokens for w in scheduled]
    query_lens = [w.num_new_tokens for w in scheduled]

    def tensor(values, dtype=torch.long):
        return torch.tensor(values, dtype=dtype, device=device)

    ctx = ForwardContext(
        positions=torch.from_numpy(np.concatenate(positions)).to(device),
        slot_mapping=torch.from_numpy(np.concatenate(slot_mapping)).to(device),
        query_start_loc=tensor(query_start_loc),
        seq_lens=tensor([c + n for c, n in zip(num_computed, query_lens)]),
        block_tables=tensor(padded),
        state_slot_ids=tensor([w.slot_id for w in scheduled]),
        has_initial_state=tensor([c > 0 for c in num_computed], torch.bool),
        query_lens=query_lens,
        num_computed=num_computed,
        kv_caches=kv_caches,
        state_caches=state_caches,
        block_size=block_size,
        split_table_width=split_table_width,
    )
    return StepInputs(tensor(input_ids), ctx, query_start_loc[:-1])
