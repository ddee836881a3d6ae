"""Turns the scheduled slots of a plan into the flat token batch and the ForwardContext."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from strata.model.context import ForwardContext, ForwardScratch
from strata.runner.table_arrays import TableArrays
from strata.transfer import index_tensor
from strata.types import ScheduledSlot


@dataclass
class StepInputs:
    input_ids: torch.Tensor        # [T]
    ctx: ForwardContext
    query_starts: list[int]        # first token row of each scheduled slot
    # a decode graph's LM head: replays it -> logits [S, V] float32 of the real slots (None: compute_logits)
    logits: Callable[[], torch.Tensor] | None = None
    layout: tuple | None = None    # the CUDA graph layout the step replayed (None: eager, or several graph parts)
    replayed: bool = False         # what the step recorded (window states) is in the graphs' memory


def build_inputs(scheduled: list[ScheduledSlot], block_tables: dict[int, list[int]], block_size: int,
                 kv_caches: dict, state_caches: dict, device: str, split_table_width: int = 0,
                 keep_window_states: bool = False, scratch: ForwardScratch | None = None,
                 host_tables: dict[int, list[int]] | None = None, host_kv_caches: dict | None = None,
                 arrays: TableArrays | None = None, kv_staging=None) -> StepInputs:
    """`scratch`: the caller's per-forward scratch, reset here (a fresh one when None). `split_table_width`: the attention kernel splits each context as if block tables had this many
    columns (the CUDA graphs' width), so eager and graph steps of one layout round alike. `host_tables`:
    each slot's first blocks in the host tier `host_kv_caches` (--kv-resident-tokens). `arrays`: the caller's
    cache of the tables' numpy copies (table_arrays.py; a fresh one when None). `kv_staging`: the host tier
    is staged (runner/kv_staging.py): `host_tables` are ring rows and `host_kv_caches` the ring."""
    arrays = arrays or TableArrays()
    input_ids: list[int] = []
    positions: list[np.ndarray] = []
    slot_mapping: list[np.ndarray] = []
    query_start_loc = [0]
    slot_tables = [arrays.get(block_tables, work.slot_id) for work in scheduled]  # each list compared once
    for work, table in zip(scheduled, slot_tables):
        pos = np.arange(work.num_computed_tokens, work.num_computed_tokens + work.num_new_tokens)
        positions.append(pos)
        slot_mapping.append(table[pos // block_size] * block_size + pos % block_size)
        input_ids.extend(work.token_ids)
        query_start_loc.append(query_start_loc[-1] + work.num_new_tokens)
    num_seqs, num_tokens = len(scheduled), len(input_ids)
    width = max(map(len, slot_tables))
    tables = np.zeros((num_seqs, width), dtype=np.int64)                                   # padded with 0
    for row, table in enumerate(slot_tables):
        tables[row, :len(table)] = table
    num_computed = tuple(w.num_computed_tokens for w in scheduled)
    query_lens = tuple(w.num_new_tokens for w in scheduled)
    host_ids = tuple(tuple(host_tables.get(w.slot_id, ())) for w in scheduled) if host_tables else ()
    host_width = max(map(len, host_ids), default=0)
    host_flat = np.zeros((num_seqs, host_width), dtype=np.int64)                           # padded with 0
    for row, work in enumerate(scheduled if host_width else ()):
        ids_of_slot = arrays.get(host_tables, work.slot_id)
        host_flat[row, :len(ids_of_slot)] = ids_of_slot
    # every index array in one host buffer, one copy to the device (pinned, not blocking the host)
    parts = [np.asarray(input_ids, dtype=np.int64), np.concatenate(positions), np.concatenate(slot_mapping),
             np.asarray(query_start_loc), np.add(num_computed, query_lens), [w.slot_id for w in scheduled],
             np.asarray(num_computed) > 0, tables.ravel(), [len(h) for h in host_ids] if host_width else [],
             host_flat.ravel()]
    packed = index_tensor(torch.from_numpy(np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])), device)
    ids, pos, slots, qsl, seq_lens, state_ids, has_initial, flat_tables, host_counts, host_table = packed.split(
        [num_tokens] * 3 + [num_seqs + 1] + [num_seqs] * 3 + [num_seqs * width]
        + [num_seqs if host_width else 0, num_seqs * host_width])
    ctx = ForwardContext(
        positions=pos,                                   # [T]
        slot_mapping=slots,                              # [T]
        query_start_loc=qsl,                             # [S + 1]
        seq_lens=seq_lens,                               # [S]
        block_tables=flat_tables.view(num_seqs, width),  # [S, W]
        state_slot_ids=state_ids,                        # [S]
        has_initial_state=has_initial != 0,              # [S] bool
        query_lens=query_lens,
        num_computed=num_computed,
        kv_caches=kv_caches,
        state_caches=state_caches,
        block_size=block_size,
        scratch=(scratch or ForwardScratch()).reset(),
        split_table_width=split_table_width,
        keep_window_states=keep_window_states,
        **({} if not host_width else {
            "host_kv_caches": host_kv_caches, "host_block_ids": host_ids,
            "host_block_tables": host_table.view(num_seqs, host_width),  # [S, Wh]
            "host_block_counts": host_counts,                            # [S]
            "kv_staging": kv_staging}),
    )
    return StepInputs(ids, ctx, query_start_loc[:-1])
