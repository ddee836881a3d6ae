"""GraphInputs.fill: the step's rows for a graph layout, written for every slot at once, against the per-slot
reference below (what fill wrote slot by slot until session 29)."""

from __future__ import annotations

import random

import numpy as np
import torch
import pytest

from strata.model.context import ForwardScratch
from strata.runner.graph_inputs import GraphInputs
from strata.types import ScheduledSlot

MOVED = -1  # the runner's table entry of a block that lives in the host tier


def fill_by_slot(inputs: GraphInputs, slots, block_tables, rows: list[int], host_tables) -> np.ndarray:
    """The reference: each slot's rows[i] rows in turn (a None slot is padding), into a copy of the host buffer."""
    host = np.zeros_like(inputs.host_np)

    def part(name):
        start, end = inputs.offsets[name]
        return host[start:end]

    bs, scratch = inputs.block_size, inputs.scratch_block
    ids, pos, mapping = part("input_ids"), part("positions"), part("slot_mapping")
    seq_lens, query_lens, state_rows, has_init = part("seq_lens"), part("query_lens"), part("state_slot_ids"), \
        part("has_initial_state")
    tables = part("block_tables").reshape(inputs.max_slots, inputs.width)
    counts = part("host_block_counts")
    s = 0
    for i, (work, n) in enumerate(zip(slots, rows)):
        window = np.arange(n)
        if work is None:
            ids[s:s + n], pos[s:s + n] = 0, window
            mapping[s:s + n] = scratch * bs + window % bs
            seq_lens[i], query_lens[i], state_rows[i], has_init[i] = n, n, inputs.scratch_state_row, 0
            tables[i, :] = scratch
        else:
            table = np.asarray(block_tables[work.slot_id])
            c, m = work.num_computed_tokens, work.num_new_tokens
            ids[s:s + m], ids[s + m:s + n] = work.token_ids, 0
            pos[s:s + n] = c + window
            mapping[s:s + m] = table[(c + window[:m]) // bs] * bs + (c + window[:m]) % bs
            mapping[s + m:s + n] = scratch * bs + window[m:] % bs
            seq_lens[i], query_lens[i], state_rows[i], has_init[i] = c + n, m, work.slot_id, c > 0
            tables[i, :len(table)], tables[i, len(table):] = table, scratch
            if inputs.host_tier:
                on_host = host_tables.get(work.slot_id, [])
                tables[i, :len(on_host)], counts[i] = on_host, len(on_host)
        s += n
    part("query_start_loc")[:len(rows) + 1] = np.concatenate([[0], np.cumsum(rows)])
    part("num_real_rows")[0] = sum(work.num_new_tokens for work in slots if work is not None)
    return host


def random_slot(rng: random.Random, taken: list, block_tables: dict, host_tables: dict, n: int, width: int, bs: int,
                host_tier: bool, fresh: bool = False) -> ScheduledSlot:
    """A slot of up to n new tokens (all n most times when n <= 4) at a random context, its tables filled in."""
    slot_id = rng.randrange(40)
    while any(w is not None and w.slot_id == slot_id for w in taken):
        slot_id = rng.randrange(40)
    m = n if n <= 4 and rng.random() < 0.7 else rng.randint(1, n)
    computed = 0 if fresh else rng.randint(0, (width - 1) * bs - n)
    blocks = -(-(computed + n) // bs) + rng.randint(0, 2)
    table = rng.sample(range(500), min(blocks, width))
    on_host = rng.randint(0, computed // bs) if host_tier else 0  # only blocks before the step's own
    host_tables[slot_id] = rng.sample(range(100), on_host)
    table[:on_host] = [MOVED] * on_host
    block_tables[slot_id] = table
    return ScheduledSlot(slot_id, computed, m, [], [rng.randrange(1000) for _ in range(m)])


def eight_slots(width: int, block_size: int, max_prompt_rows: int, host_tier: bool) -> GraphInputs:
    """Graph inputs of 8 slots of up to 4 tokens (or prompts up to max_prompt_rows rows), scratch block 999."""
    return GraphInputs(max_slots=8, max_tokens_per_slot=4, max_blocks_per_slot=width, block_size=block_size,
                       scratch_block=999, scratch_state_row=8, device="cpu", max_prompt_rows=max_prompt_rows,
                       host_tier=host_tier)


def assert_filled_like(inputs: GraphInputs, expected: np.ndarray, num_slots: int, num_rows: int, case) -> None:
    """Every value a step of the layout reads of each part equal."""
    for name, (start, _) in inputs.offsets.items():
        size = {"input_ids": num_rows, "positions": num_rows, "slot_mapping": num_rows,
                "query_start_loc": num_slots + 1, "num_real_rows": 1,
                "host_block_counts": num_slots * inputs.host_tier,
                "block_tables": num_slots * inputs.width}.get(name, num_slots)
        np.testing.assert_array_equal(inputs.host_np[start:start + size], expected[start:start + size],
                                      err_msg=f"case {case}: {name}")


@pytest.mark.parametrize("host_tier", [False, True])
def test_fill_writes_what_the_per_slot_reference_writes(host_tier):
    """Decode steps, verification windows and fresh prompts padded in place, with padding slots after them
    and (with a host tier) each slot's oldest blocks on the host: every value of the host buffer equal."""
    rng = random.Random(0)
    bs, width = 4, 40
    inputs = eight_slots(width, bs, 32, host_tier)
    for case in range(60):
        n = rng.choice([1, 1, 2, 4, 16, 32])
        num_slots = 1 if n > 4 else rng.randint(1, 8)
        count = rng.randint(0 if case % 10 == 0 else 1, num_slots)   # every few cases a capture's padding only
        scheduled, block_tables, host_tables = [], {}, {}
        for i in range(count):
            scheduled.append(random_slot(rng, scheduled, block_tables, host_tables, n, width, bs, host_tier))
        inputs.fill(scheduled, block_tables, num_slots, n, host_tables if host_tier else None)
        expected = fill_by_slot(inputs, scheduled + [None] * (num_slots - count), block_tables, [n] * num_slots,
                                host_tables)
        assert_filled_like(inputs, expected, num_slots, num_slots * n, case)


@pytest.mark.parametrize("host_tier", [False, True])
def test_fill_rows_writes_a_mixed_layout_as_the_reference_does(host_tier):
    """A mixed graph's layout: windows of one length (some of them padding), then fresh prompts padded in place
    (some of them padding slots too): every value equal to the per-slot reference; the context's views cover
    exactly the layout's rows and slots, with the host lengths of each slot in place."""
    rng = random.Random(1)
    bs, width = 4, 40
    inputs = eight_slots(width, bs, 512, host_tier)
    for case in range(60):
        n, length = rng.choice([1, 2, 4]), rng.choice([32, 64])
        num_windows, num_prompts = rng.randint(1, 4), rng.randint(1, 4)
        rows = [n] * num_windows + [length] * num_prompts
        slots, block_tables, host_tables = [None] * len(rows), {}, {}
        for i in sorted(rng.sample(range(len(rows)), rng.randint(0 if case % 10 == 0 else 1, len(rows)))):
            slots[i] = random_slot(rng, slots, block_tables, host_tables, rows[i], width, bs, host_tier,
                                   fresh=i >= num_windows)
        inputs.fill_rows(slots, rows, block_tables, host_tables if host_tier else None)
        expected = fill_by_slot(inputs, slots, block_tables, rows, host_tables)
        assert_filled_like(inputs, expected, len(rows), sum(rows), case)
        input_ids, ctx = inputs.context(0, 0, {}, {}, False, ForwardScratch(), slots, rows=rows)
        assert input_ids.shape == (sum(rows),) and ctx.seq_lens.shape == (len(rows),)
        assert ctx.query_start_loc.tolist() == [0, *np.cumsum(rows).tolist()]
        assert ctx.query_lens == tuple(r if w is None else w.num_new_tokens for w, r in zip(slots, rows))
        assert ctx.num_computed == tuple(0 if w is None else w.num_computed_tokens for w in slots)


def test_shift_moves_windows_planned_ahead_to_where_fill_puts_them():
    """A verification step planned as if the step before accepted every draft, then shifted on the device by
    accepted - drafts per slot: positions, context lengths and KV slot mapping equal a fill at the true
    positions (the rest of the buffers never depends on them); padding slots after the real ones stay put."""
    rng = random.Random(1)
    bs, width, n = 4, 12, 4
    ahead = GraphInputs(max_slots=8, max_tokens_per_slot=n, max_blocks_per_slot=width, block_size=bs,
                        scratch_block=999, scratch_state_row=8, device="cpu")
    exact = GraphInputs(max_slots=8, max_tokens_per_slot=n, max_blocks_per_slot=width, block_size=bs,
                        scratch_block=999, scratch_state_row=8, device="cpu")
    for case in range(40):
        count = rng.randint(1, 6)
        num_slots = rng.choice([s for s in (1, 2, 4, 8) if s >= count])
        planned, true, block_tables, delta = [], [], {}, []
        for slot_id in rng.sample(range(20), count):
            shortfall = -rng.randint(0, n - 1)                       # accepted - drafts of the step before
            computed = rng.randint(n, (width - 1) * bs - 2 * n)      # as if every draft was accepted
            table = rng.sample(range(500), -(-(computed + n) // bs))
            block_tables[slot_id] = table
            tokens = [rng.randrange(1000) for _ in range(n)]
            planned.append(ScheduledSlot(slot_id, computed, n, [], tokens, tokens[1:]))
            true.append(ScheduledSlot(slot_id, computed + shortfall, n, [], tokens, tokens[1:]))
            delta.append(shortfall)
        ahead.fill(planned, block_tables, num_slots, n)
        ahead.shift(torch.tensor(delta), num_slots, n)
        exact.fill(true, block_tables, num_slots, n)
        for name in ("positions", "slot_mapping", "seq_lens", "input_ids", "query_start_loc", "block_tables"):
            size = num_slots if name == "seq_lens" else num_slots + 1 if name == "query_start_loc" else \
                num_slots * width if name == "block_tables" else num_slots * n
            torch.testing.assert_close(ahead._device(name)[:size], exact._device(name)[:size], rtol=0, atol=0,
                                       msg=f"case {case}: {name}")
