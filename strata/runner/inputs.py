"""Turns the scheduled slots of a plan into the flat token batch and the ForwardContext."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata.model.context import ForwardContext
from strata.types import ScheduledSlot


@dataclass
class StepInputs:
    input_ids: torch.Tensor        # [T]
    ctx: ForwardContext
    query_starts: list[int]        # first token row of each scheduled slot


def build_inputs(scheduled: list[ScheduledSlot], block_tables: dict[int, list[int]], block_size: int,
                 kv_caches: dict, state_caches: dict, device: str, min_table_width: int = 0) -> StepInputs:
    """`min_table_width` pads block tables to at least that many columns: with CUDA graphs on, eager steps
    use the graphs' width, so the attention kernel splits the context the same way in both paths."""
    input_ids: list[int] = []
    positions: list[int] = []
    slot_mapping: list[int] = []
    query_start_loc = [0]
    for work in scheduled:
        table = block_tables[work.slot_id]
        start = work.num_computed_tokens
        for pos in range(start, start + work.num_new_tokens):
            slot_mapping.append(table[pos // block_size] * block_size + pos % block_size)
        positions.extend(range(start, start + work.num_new_tokens))
        input_ids.extend(work.token_ids)
        query_start_loc.append(query_start_loc[-1] + work.num_new_tokens)
    width = max(min_table_width, *(len(block_tables[w.slot_id]) for w in scheduled))
    padded = [block_tables[w.slot_id] + [0] * (width - len(block_tables[w.slot_id])) for w in scheduled]
    num_computed = [w.num_computed_tokens for w in scheduled]
    query_lens = [w.num_new_tokens for w in scheduled]

    def tensor(values, dtype=torch.long):
        return torch.tensor(values, dtype=dtype, device=device)

    ctx = ForwardContext(
        positions=tensor(positions),
        slot_mapping=tensor(slot_mapping),
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
    )
    return StepInputs(tensor(input_ids), ctx, query_start_loc[:-1])
