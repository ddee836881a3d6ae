"""CUDA graphs: persistent inputs (CPU), graph on/off token identity and LRU eviction (GPU, `-m gpu`),
and the memory plan's clear error when the model does not fit (GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata import LLM, SamplingParams
from strata.model.context import ForwardScratch
from strata.runner.cuda_graphs import _still_valid
from strata.runner.graph_layouts import MIXED_GRAPH_ROOM
from strata.runner.graph_inputs import GraphInputs
from strata.types import ScheduledSlot

gpu = pytest.mark.gpu


def test_graph_inputs_fill_real_rows_then_padding():
    inputs = GraphInputs(max_slots=4, max_tokens_per_slot=3, max_blocks_per_slot=5, block_size=4,
                         scratch_block=9, scratch_state_row=7, device="cpu")
    scheduled = [ScheduledSlot(slot_id=2, num_computed_tokens=5, num_new_tokens=2, new_block_ids=[], token_ids=[11, 12]),
                 ScheduledSlot(slot_id=0, num_computed_tokens=0, num_new_tokens=2, new_block_ids=[], token_ids=[13, 14])]
    tables = {2: [4, 6], 0: [1]}
    inputs.fill(scheduled, tables, num_slots=3, tokens_per_slot=2)
    input_ids, ctx = inputs.context(3, 2, {}, {}, False, ForwardScratch())
    inputs.derive_flags(3)
    assert input_ids.tolist() == [11, 12, 13, 14, 0, 0]
    assert ctx.positions.tolist() == [5, 6, 0, 1, 0, 1]
    # position 5 -> block 6 offset 1; 6 -> block 6 offset 2; slot 0: block 1; padding: scratch block 9
    assert ctx.slot_mapping.tolist() == [6 * 4 + 1, 6 * 4 + 2, 4, 5, 36, 37]
    assert ctx.query_start_loc.tolist() == [0, 2, 4, 6]
    assert ctx.seq_lens.tolist() == [7, 2, 2]
    assert ctx.state_slot_ids.tolist() == [2, 0, 7]
    assert ctx.has_initial_state.tolist() == [True, False, False]
    assert ctx.block_tables[:, :2].tolist() == [[4, 6], [1, 9], [9, 9]]  # past a table: the scratch block
    assert inputs.num_real_rows.tolist() == [4]  # routing statistics skip rows 4 and 5
    assert ctx.real_query_lens.tolist() == [2, 2, 2]
    # a smaller layout later reads only its own prefix of every buffer
    inputs.fill(scheduled[1:], tables, num_slots=1, tokens_per_slot=2)
    input_ids, ctx = inputs.context(1, 2, {}, {}, False, ForwardScratch())
    assert input_ids.tolist() == [13, 14] and ctx.slot_mapping.tolist() == [4, 5]
    inputs.fill([], {}, num_slots=2, tokens_per_slot=2)  # capture: padding only
    assert inputs.num_real_rows.tolist() == [0]
    assert np.all(inputs.host_np[inputs.offsets["query_start_loc"][0]:][:2] == [0, 2])


def test_graph_inputs_pad_a_fresh_prompt_in_place():
    """A 5-token prompt in a 8-token layout: its padding rows write the scratch block, sit at the
    following positions, and are not counted as real rows."""
    inputs = GraphInputs(max_slots=2, max_tokens_per_slot=2, max_blocks_per_slot=3, block_size=4,
                         scratch_block=9, scratch_state_row=7, device="cpu", max_prompt_rows=8)
    prompt = ScheduledSlot(slot_id=1, num_computed_tokens=0, num_new_tokens=5, new_block_ids=[3, 5],
                           token_ids=[21, 22, 23, 24, 25])
    inputs.fill([prompt], {1: [3, 5]}, num_slots=1, tokens_per_slot=8)
    input_ids, ctx = inputs.context(1, 8, {}, {}, False, ForwardScratch())
    assert input_ids.tolist() == [21, 22, 23, 24, 25, 0, 0, 0]
    assert ctx.positions.tolist() == list(range(8))
    assert ctx.slot_mapping.tolist() == [12, 13, 14, 15, 20, 9 * 4 + 1, 9 * 4 + 2, 9 * 4 + 3]
    assert ctx.seq_lens.tolist() == [8] and ctx.block_tables.tolist() == [[3, 5, 9]]
    assert inputs.num_real_rows.tolist() == [5]
    assert ctx.real_query_lens.tolist() == [5]  # recurrent layers stop the prompt's state after these


def test_graph_inputs_carry_host_kv_blocks_in_the_table_s_first_columns():
    """KV beyond VRAM: a slot's host blocks go into its table row where the runner's table holds -1, with
    their count beside it; the one table serves as the host table too. Padding rows and captures count no
    host blocks, and inputs without a host tier keep their layout and give contexts without one."""
    inputs = GraphInputs(max_slots=4, max_tokens_per_slot=2, max_blocks_per_slot=6, block_size=4,
                         scratch_block=9, scratch_state_row=7, device="cpu", host_tier=True)
    scheduled = [ScheduledSlot(slot_id=2, num_computed_tokens=17, num_new_tokens=2, new_block_ids=[], token_ids=[11, 12]),
                 ScheduledSlot(slot_id=0, num_computed_tokens=3, num_new_tokens=2, new_block_ids=[], token_ids=[13, 14])]
    tables = {2: [-1, -1, -1, 6, 8], 0: [1, 5]}  # slot 2's first three blocks are in the host tier
    host_tables = {2: [30, 4, 12]}
    inputs.fill(scheduled, tables, num_slots=3, tokens_per_slot=2, host_tables=host_tables)
    host_caches = {0: (torch.zeros(40, 4, 1, 2), torch.zeros(40, 4, 1, 2))}
    _, ctx = inputs.context(3, 2, {}, {}, False, ForwardScratch(), scheduled, host_caches, host_tables)
    assert ctx.block_tables.tolist() == [[30, 4, 12, 6, 8, 9], [1, 5, 9, 9, 9, 9], [9] * 6]
    assert ctx.host_block_tables.data_ptr() == ctx.block_tables.data_ptr()
    assert ctx.host_block_counts.tolist() == [3, 0, 0]
    assert ctx.host_block_ids == ((30, 4, 12), ()) and ctx.has_host_blocks
    assert ctx.host_kv_caches is host_caches
    # the new tokens (positions 17, 18) are written to the device block after the host ones
    assert ctx.slot_mapping.tolist() == [8 * 4 + 1, 8 * 4 + 2, 1 * 4 + 3, 5 * 4 + 0, 9 * 4 + 0, 9 * 4 + 1]
    # a smaller layout later: slot 0 alone, no host blocks; the counts travel with the one copy
    inputs.fill(scheduled[1:], tables, num_slots=2, tokens_per_slot=2, host_tables=host_tables)
    _, ctx = inputs.context(2, 2, {}, {}, False, ForwardScratch(), scheduled[1:], host_caches, host_tables)
    assert ctx.host_block_counts.tolist() == [0, 0] and ctx.block_tables[0, :2].tolist() == [1, 5]
    assert ctx.host_block_ids == ((),) and not ctx.has_host_blocks and ctx.host_kv_caches is host_caches
    # a capture: padding only, the host tier in the context (the kernel's host variant), no host block
    inputs.fill(scheduled, tables, num_slots=2, tokens_per_slot=2, host_tables=host_tables)
    inputs.fill([], {}, num_slots=2, tokens_per_slot=2)
    _, ctx = inputs.context(2, 2, {}, {}, False, ForwardScratch(), host_kv_caches=host_caches)
    assert ctx.host_block_counts.tolist() == [0, 0] and ctx.block_tables.tolist() == [[9] * 6] * 2
    assert ctx.host_block_ids == () and ctx.host_block_tables is not None
    plain = GraphInputs(max_slots=4, max_tokens_per_slot=2, max_blocks_per_slot=6, block_size=4,
                        scratch_block=9, scratch_state_row=7, device="cpu")
    assert plain.offsets["block_tables"] == tuple(o - 4 for o in inputs.offsets["block_tables"])
    plain.fill(scheduled[1:], tables, num_slots=1, tokens_per_slot=2)
    _, ctx = plain.context(1, 2, {}, {}, False, ForwardScratch(), scheduled[1:])
    assert ctx.host_kv_caches is None and ctx.host_block_tables is None and ctx.host_block_counts is None


def test_a_replayed_step_s_context_reads_host_blocks_like_an_eager_one():
    """The context a graph replay hands on (the MTP head's first pass reads it) gives the eager context's
    attention output on the torch path: its one table's host columns are read from the host tier. The
    device blocks whose numbers are the host blocks' hold NaN, so a host column read there shows."""
    from strata.cache.host_kv import HostKVPool
    from strata.cache.pools import KVPool
    from strata.model.attention import paged_attention
    from strata.runner.inputs import build_inputs

    generator = torch.Generator().manual_seed(26)
    pool = KVPool([0], num_blocks=12, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.float32, device="cpu")
    host = HostKVPool(pool, num_blocks=6)
    for t in (*pool.caches[0], *host.caches[0]):
        t.copy_(torch.randn(t.shape, generator=generator))
    for t in pool.caches[0]:
        t[[4, 1]] = float("nan")
    scheduled = [ScheduledSlot(slot_id=1, num_computed_tokens=13, num_new_tokens=2, new_block_ids=[], token_ids=[1, 2]),
                 ScheduledSlot(slot_id=0, num_computed_tokens=5, num_new_tokens=2, new_block_ids=[], token_ids=[3, 4])]
    tables, host_tables = {1: [-1, -1, 3, 7], 0: [5, 2]}, {1: [4, 1]}
    eager = build_inputs(scheduled, tables, 4, pool.caches, {}, "cpu", host_tables=host_tables,
                         host_kv_caches=host.caches).ctx
    inputs = GraphInputs(max_slots=4, max_tokens_per_slot=2, max_blocks_per_slot=6, block_size=4,
                         scratch_block=11, scratch_state_row=3, device="cpu", host_tier=True)
    inputs.fill(scheduled, tables, num_slots=2, tokens_per_slot=2, host_tables=host_tables)
    _, replayed = inputs.context(2, 2, pool.caches, {}, False, ForwardScratch(), scheduled, host.caches, host_tables)
    q = torch.randn(4, 4, 8, generator=generator)                                     # [T, H, D]
    host_kv = (*host.caches[0], None)
    out = paged_attention(q, *pool.caches[0], replayed, 0.3, None, host_kv)
    assert not out.isnan().any()
    assert torch.equal(out, paged_attention(q, *pool.caches[0], eager, 0.3, None, host_kv))


def test_a_graph_cache_reads_a_host_tier_iff_its_inputs_carry_one():
    from strata.runner.cuda_graphs import CudaGraphCache

    with pytest.raises(AssertionError, match="host KV tier"):
        CudaGraphCache(torch.nn.Identity(), GraphInputs(2, 1, 4, 4, 0, 0, "cpu", host_tier=True), {}, {}, 2, 1, 2)


def test_a_step_of_fresh_prompts_and_windows_splits_into_graph_layouts():
    from strata.runner.cuda_graphs import CudaGraphCache

    cache = CudaGraphCache(torch.nn.Identity(), GraphInputs(8, 2, 4, 4, 0, 0, "cpu", max_prompt_rows=2048), {}, {},
                           max_slots=8, max_tokens_per_slot=2, capacity=8, max_prompt_tokens=64)

    def slot(i, computed, n):
        return ScheduledSlot(i, computed, n, [], [1] * n)

    assert cache.prompt_layout(slot(0, 0, 5)) == (1, 16)
    assert cache.prompt_layout(slot(0, 0, 33)) == (1, 64)
    assert cache.prompt_layout(slot(0, 0, 33), num_prompts=3) == (4, 64)  # prompt counts pad to powers of two
    assert cache.prompt_layout(slot(0, 0, 5), num_prompts=9) is None      # more prompts than slots
    assert cache.prompt_layout(slot(0, 0, 65)) is None     # longer than the largest prompt layout
    assert cache.prompt_layout(slot(0, 4, 20)) is None     # a later chunk attends to its prefix: eager
    step = [slot(0, 9, 1), slot(1, 0, 20), slot(2, 30, 1), slot(3, 0, 7)]
    # the windows in one graph, both fresh prompts in another (padded to the longer one's 32 tokens)
    assert cache.split_layouts(step) == [((2, 1), [0, 2]), ((2, 32), [1, 3])]
    assert cache.split_layouts([slot(0, 0, 40)]) == [((1, 64), [0])]
    # nine prompts: eight in one graph, the ninth in another
    nine = [slot(i, 0, 3 + i) for i in range(9)]
    assert cache.split_layouts(nine) == [((8, 16), [8, 7, 6, 5, 4, 3, 2, 1]), ((1, 16), [0])]
    assert cache.split_layouts([slot(0, 9, 1), slot(1, 9, 2), slot(2, 0, 8)]) is None  # ragged windows
    assert cache.split_layouts([slot(0, 9, 1), slot(1, 0, 100)]) is None
    cache.eager_only.add((2, 32))                        # a layout whose capture failed: one graph per prompt
    assert cache.split_layouts(step) == [((2, 1), [0, 2]), ((1, 32), [1]), ((1, 16), [3])]
    cache.eager_only.add((1, 32))
    assert cache.split_layouts(step) is None
    off = CudaGraphCache(torch.nn.Identity(), GraphInputs(8, 2, 4, 4, 0, 0, "cpu"), {}, {}, 8, 2, capacity=8)
    assert off.split_layouts(step) is None               # max_prompt_tokens 0: mixed steps stay eager


def test_fresh_prompts_beside_windows_fit_one_mixed_layout():
    """Windows first (their uniform layout), then the prompts padded to a power of two of at least 32 tokens, their
    count padded while the slots allow; None where a step lacks windows or prompts, or they overflow the slots or
    rows, or the windows take a model's variant."""
    from strata.runner.cuda_graphs import CudaGraphCache
    from strata.runner.graph_layouts import prompts_beside, slot_rows

    cache = CudaGraphCache(torch.nn.Identity(), GraphInputs(8, 4, 4, 4, 0, 0, "cpu", max_prompt_rows=2048), {}, {},
                           max_slots=8, max_tokens_per_slot=4, capacity=0, max_prompt_tokens=1024)

    def slot(i, computed, n):
        return ScheduledSlot(i, computed, n, [], [1] * n)

    step = [slot(0, 9, 4), slot(1, 0, 20), slot(2, 30, 4), slot(3, 0, 7)]
    assert cache.mixed_layout(step) == ((2, 4, (2, 32)), [0, 2], [1, 3])
    key = cache.mixed_layout(step)[0]
    assert slot_rows(key) == [4, 4, 32, 32] and prompts_beside(key) == (2, 32) and prompts_beside((2, 4)) is None
    three = [slot(0, 9, 1), slot(1, 0, 100), slot(2, 0, 5), slot(3, 0, 40)]
    assert cache.mixed_layout(three) == ((1, 1, (4, 128)), [0], [1, 2, 3])   # three prompts pad to four
    seven = [slot(i, 9, 1) for i in range(5)] + [slot(5, 0, 3), slot(6, 0, 3), slot(7, 0, 3)]
    assert cache.mixed_layout(seven) == ((5, 1, (3, 32)), list(range(5)), [5, 6, 7])  # four would pass 8 slots
    assert cache.mixed_layout([slot(0, 9, 1), slot(1, 0, 1000), slot(2, 0, 120)]) is None  # 2,049 rows
    assert cache.mixed_layout([slot(0, 0, 20), slot(1, 0, 7)]) is None        # prompts alone: split_layouts'
    assert cache.mixed_layout([slot(0, 9, 2), slot(1, 9, 2)]) is None          # windows alone: layout_for's
    assert cache.mixed_layout([slot(0, 9, 1), slot(1, 9, 2), slot(2, 0, 8)]) is None  # ragged windows
    cache.eager_only.add((2, 4, (2, 32)))                                       # its capture failed: two graphs
    assert cache.mixed_layout(step) is None and cache.split_layouts(step) == [((2, 4), [0, 2]), ((2, 32), [1, 3])]
    assert cache.capacity == len(cache.ladder_keys()) + MIXED_GRAPH_ROOM
    off = CudaGraphCache(torch.nn.Identity(), GraphInputs(8, 2, 4, 4, 0, 0, "cpu"), {}, {}, 8, 2, capacity=0)
    assert off.mixed_layout(step) is None and off.capacity == len(off.ladder_keys())  # no prompt graphs at all


def test_a_mixed_layout_s_prompts_are_longer_than_any_window_the_layers_tell_apart():
    """The layers tell a mixed graph's prompts from its windows by length: attention's short windows and the
    recurrent layers' kept windows stop below the shortest prompt a mixed layout pads to."""
    from strata.model.attention import BATCHED_MAX_QUERY_LEN
    from strata.model.gated_delta_net import _RECURRENT_MAX_QUERY_LEN
    from strata.runner.graph_layouts import MIN_MIXED_PROMPT_LAYOUT

    assert max(BATCHED_MAX_QUERY_LEN, _RECURRENT_MAX_QUERY_LEN) < MIN_MIXED_PROMPT_LAYOUT


def test_a_model_variant_keys_its_own_graphs():
    """A step the model names a variant for takes the key (slots, tokens, variant); one it refuses runs eagerly;
    fresh prompts take plain prompt layouts only; the warm-up ladder holds one slot's decode in each warmed
    variant."""
    from strata.runner.cuda_graphs import CudaGraphCache

    class Model(torch.nn.Identity):
        def graph_variant(self, scheduled):  # a context past 20 tokens: "wide"; a window of 2 there: none
            if all(w.num_computed_tokens + w.num_new_tokens <= 20 for w in scheduled):
                return ""
            return None if any(w.num_new_tokens > 1 for w in scheduled) else "wide"

        def warm_graph_variants(self):
            return ("wide",)

    cache = CudaGraphCache(Model(), GraphInputs(8, 2, 4, 4, 0, 0, "cpu", max_prompt_rows=2048), {}, {},
                           max_slots=8, max_tokens_per_slot=2, capacity=0, max_prompt_tokens=64)

    def slot(i, computed, n):
        return ScheduledSlot(i, computed, n, [], [1] * n)

    assert cache.layout_for([slot(0, 9, 1), slot(1, 3, 1), slot(2, 5, 1)]) == (3, 1)
    assert cache.layout_for([slot(0, 9, 1), slot(1, 30, 1), slot(2, 5, 1)]) == (3, 1, "wide")
    assert cache.layout_for([slot(0, 30, 2)]) is None
    assert cache.prompt_layout(slot(0, 0, 16)) == (1, 16) and cache.prompt_layout(slot(0, 0, 32)) is None
    keys = cache.ladder_keys()
    assert (1, 1, "wide") in keys and keys.index((1, 1, "wide")) < keys.index((1, 16))
    assert cache.capacity == len(keys) + MIXED_GRAPH_ROOM  # room for mixed layouts beside the ladder's
    cache.eager_only.add((3, 1, "wide"))                 # a variant whose capture failed runs eagerly
    assert cache.layout_for([slot(0, 30, 1), slot(1, 3, 1), slot(2, 5, 1)]) is None


def test_several_fresh_prompts_share_a_graph_up_to_its_row_budget():
    from strata.runner.cuda_graphs import CudaGraphCache
    from strata.runner.graph_layouts import PROMPT_GRAPH_ROWS

    cache = CudaGraphCache(torch.nn.Identity(), GraphInputs(8, 1, 80, 4, 0, 0, "cpu", max_prompt_rows=PROMPT_GRAPH_ROWS),
                           {}, {}, max_slots=8, max_tokens_per_slot=1, capacity=8, max_prompt_tokens=1024)
    prompts = [ScheduledSlot(i, 0, 600, [], [1] * 600) for i in range(3)]
    assert 2 * 1024 <= PROMPT_GRAPH_ROWS < 4 * 1024
    assert cache.split_layouts(prompts) == [((2, 1024), [0, 1]), ((1, 1024), [2])]
    six = CudaGraphCache(torch.nn.Identity(), GraphInputs(6, 1, 80, 4, 0, 0, "cpu", max_prompt_rows=PROMPT_GRAPH_ROWS),
                         {}, {}, max_slots=6, max_tokens_per_slot=1, capacity=8, max_prompt_tokens=64)
    assert six.prompt_counts == (1, 2, 4, 6)  # powers of two, then every slot at once
    assert six.prompt_layout(prompts[0], num_prompts=5) is None  # 600 tokens: past this cache's prompts
    assert six.prompt_layout(ScheduledSlot(0, 0, 40, [], [1] * 40), num_prompts=5) == (6, 64)
    with pytest.raises(AssertionError, match="largest prompt layout"):
        CudaGraphCache(torch.nn.Identity(), GraphInputs(8, 1, 80, 4, 0, 0, "cpu", max_prompt_rows=1024),
                       {}, {}, max_slots=8, max_tokens_per_slot=1, capacity=8, max_prompt_tokens=1024)


def test_prompt_token_limit_is_a_power_of_two_within_both_limits():
    from strata.runner.graph_layouts import prompt_token_limit

    assert prompt_token_limit(512, 4096) == 512
    assert prompt_token_limit(300, 4096) == 256   # a 290-token prompt would pad to 512: past the inputs
    assert prompt_token_limit(512, 200) == 128    # padded positions stay inside the model's length
    assert prompt_token_limit(15, 4096) == 0 and prompt_token_limit(0, 4096) == 0


def test_a_graph_split_for_offloaded_experts_is_replayed_only_while_its_plan_holds():
    """Plans are (placement epoch, layers split at, layers whose device experts the graph skipped)."""
    captured = (1, frozenset({2, 3}), frozenset({3}))
    assert _still_valid(captured, captured)
    assert _still_valid(captured, (1, frozenset({3}), frozenset({3})))        # layer 2 became all resident
    assert _still_valid(captured, (1, frozenset({2, 3}), frozenset({2, 3})))  # layer 2 lost its device experts
    assert not _still_valid(captured, (2, frozenset({2, 3}), frozenset({3})))  # experts placed again
    assert not _still_valid(captured, (1, frozenset({2, 3, 4}), frozenset({3})))  # layer 4 now needs the host
    assert not _still_valid(captured, (1, frozenset({2, 3}), frozenset()))  # layer 3 has device experts now


def test_graph_cache_layouts_pad_up_the_ladder():
    from strata.runner.cuda_graphs import CudaGraphCache

    inputs = GraphInputs(12, 4, 3, 4, 0, 0, "cpu")
    cache = CudaGraphCache(torch.nn.Identity(), inputs, {}, {}, max_slots=12, max_tokens_per_slot=4, capacity=3)

    def step(*lens):
        return [ScheduledSlot(i, 8, n, [], [1] * n) for i, n in enumerate(lens)]

    assert cache.layout_for(step(1)) == (1, 1)
    assert cache.layout_for(step(4, 4, 4, 4, 4, 4, 4, 4, 4)) == (10, 4)
    assert cache.layout_for(step(*[1] * 12)) == (12, 1)
    assert cache.layout_for(step(*[1] * 13)) is None      # more slots than graphs cover
    assert cache.layout_for(step(2, 3)) is None           # ragged windows run eagerly
    assert cache.layout_for(step(5)) is None              # wider than the largest verification window
    with pytest.raises(ValueError, match="0 .every warm-up layout. or more"):
        CudaGraphCache(torch.nn.Identity(), inputs, {}, {}, 12, 4, capacity=-1)


def test_warm_up_captures_decode_layouts_first_up_to_the_capacity(monkeypatch):
    from strata.runner.cuda_graphs import CudaGraphCache

    cache = CudaGraphCache(torch.nn.Identity(), GraphInputs(6, 3, 2, 4, 0, 0, "cpu"), {}, {}, max_slots=6,
                           max_tokens_per_slot=3, capacity=8)
    captured = []

    def fake_capture(key):
        captured.append(key)
        cache.graphs[key] = object()
        return cache.graphs[key]

    monkeypatch.setattr(cache, "_capture", fake_capture)
    assert cache.warm_up() == 8
    assert captured == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (1, 2), (2, 2)]
    # fresh prompt layouts come after plain decode, before longer verification windows
    cache = CudaGraphCache(torch.nn.Identity(), GraphInputs(2, 3, 2, 4, 0, 0, "cpu", max_prompt_rows=2048), {}, {},
                           max_slots=2, max_tokens_per_slot=3, capacity=6, max_prompt_tokens=64)
    captured.clear()
    monkeypatch.setattr(cache, "_capture", fake_capture)
    assert cache.warm_up() == 6
    assert captured == [(1, 1), (2, 1), (1, 16), (1, 32), (1, 64), (1, 2)]
    # capacity 0 (the default) holds every layout: decode, single prompts, windows, then prompt pairs (and has room
    # for the mixed layouts steps bring later)
    cache = CudaGraphCache(torch.nn.Identity(), GraphInputs(2, 3, 2, 4, 0, 0, "cpu", max_prompt_rows=2048), {}, {},
                           max_slots=2, max_tokens_per_slot=3, capacity=0, max_prompt_tokens=64)
    captured.clear()
    monkeypatch.setattr(cache, "_capture", fake_capture)
    assert cache.warm_up() == 12 == cache.capacity - MIXED_GRAPH_ROOM
    assert captured == [(1, 1), (2, 1), (1, 16), (1, 32), (1, 64), (1, 2), (2, 2), (1, 3), (2, 3),
                        (2, 16), (2, 32), (2, 64)]


# ---- GPU ------------------------------------------------------------------------------------------

def _prompts(lengths):
    return [torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in lengths]


def _staggered(llm: LLM, prompts, max_tokens):
    """Requests with different output lengths, so the batch shrinks step by step through many layouts."""
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in max_tokens]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    return [o.outputs[0].token_ids for o in outs]


# a top-2 logprob margin under this (nats) is a near tie: bf16 sums in another order (a graph's padded rows, another
# split of a step) may pick the other token there without a fault
NEAR_TIE = 0.05


def _equal_or_apart_at_a_near_tie(model_dir: str, prompts, runs: dict) -> None:
    """runs[False] (eager) and runs[True] (graphs), greedy tokens per prompt: equal, or apart from a position where
    plain eager decoding (no drafts: speculative output equals it in exact arithmetic) has both tokens as its top
    two within NEAR_TIE."""
    apart = [(i, next(p for p, (a, b) in enumerate(zip(*pair)) if a != b))
             for i, pair in enumerate(zip(runs[False], runs[True])) if pair[0] != pair[1]]
    if not apart:
        return
    llm = LLM(model_dir, dtype="bfloat16", device="cuda", max_num_seqs=1, cuda_graphs=False)
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=2)
    margins = []
    for i, at in apart:
        step = llm.generate([{"prompt_token_ids": prompts[i] + runs[False][i][:at]}], params)[0].outputs[0].logprobs[0]
        top = {token: lp.logprob if hasattr(lp, "logprob") else lp for token, lp in step.items()}
        pair = (runs[False][i][at], runs[True][i][at])
        margins.append((i, at, pair, top))
    del llm
    print("apart between eager and graphs (request, position, tokens, eager top two):", margins)
    for i, at, pair, top in margins:
        assert set(pair) == set(top), margins
        assert abs(top[pair[0]] - top[pair[1]]) < NEAR_TIE, margins


# fixed draft lengths in every graphs on / off comparison: the adaptive length follows measured step times, which
# graphs (and the tests run before, in one process) change, and other windows round other bf16 sums, so a token
# may differ without a fault (sessions 36-37: a Qwen4-Exp MTP run differed only as the 13th test of a process)
SPECS = [None, {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}]
MTP = {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}


@gpu
@pytest.mark.parametrize("family, spec", [("llama", None), ("qwen3_moe", None), ("qwen3_next", None),
                                          ("qwen3_5_moe", None), ("qwen3_moe", SPECS[1]),
                                          ("qwen3_next+mtp", MTP)])
def test_graph_on_off_token_identity(family, spec, tiny_model_dir):
    prompts = _prompts([5, 9, 17, 3, 30, 12])
    lengths = [24, 8, 16, 30, 4, 12]
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir(family), dtype="bfloat16", device="cuda", max_num_seqs=6, block_size=4,
                  speculative_config=spec, cuda_graphs=graphs)
        runs[graphs] = _staggered(llm, prompts, lengths)
        stats = llm.engine.runner.graph_stats()
        if graphs:
            assert stats["replays"] > 0 and stats["captures"] > 0
            assert stats["head_replays"] > 0  # decode and verify steps sample from their layouts' LM head graphs
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


def _count_host_replays(runner) -> list[int]:
    """A counter of graph replays of steps where some slot reads host KV blocks (wraps CudaGraphCache.run)."""
    graphs, count = runner.graphs, [0]
    run = graphs.run

    def counted(key, scheduled, block_tables, *args, **kwargs):
        step = run(key, scheduled, block_tables, *args, **kwargs)
        if step is not None and runner.host_kv.has_host_blocks(scheduled):
            count[0] += 1
        return step

    graphs.run = counted
    return count


@gpu
@pytest.mark.parametrize("family, spec, kv_dtype", [
    ("llama", None, "auto"), ("llama", None, "int8"), ("qwen3_next", None, "auto"),
    ("qwen3_next", SPECS[1], "auto"), ("qwen3_next+mtp", MTP, "auto")])
def test_host_kv_blocks_replay_graphs_token_identity(family, spec, kv_dtype, tiny_model_dir):
    """KV beyond VRAM with graphs: contexts up to ~8x the 16-token resident window, so most decode and
    verification steps read host blocks; those steps replay graphs (the kernel reads the host tier through
    the graph's table) and the greedy tokens equal a run without graphs (whose such steps run eagerly
    through the same kernel). The MTP head's first pass reads the replayed step's context, host blocks
    included. Async scheduling (the default) queues the decode steps' offload copies without waiting."""
    prompts = _prompts([40, 70, 25, 100])
    lengths = [60, 30, 80, 20]
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir(family), dtype="bfloat16", device="cuda", max_num_seqs=4, block_size=4,
                  kv_resident_tokens=16, kv_cache_dtype=kv_dtype, speculative_config=spec, cuda_graphs=graphs)
        runner = llm.engine.runner
        host_replays = _count_host_replays(runner) if graphs else None
        runs[graphs] = _staggered(llm, prompts, lengths)
        if graphs:
            assert host_replays[0] >= 20
        del llm, runner
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@gpu
@pytest.mark.parametrize("family, spec, layers", [
    ("llama", None, 1), ("qwen3_next", None, 2), ("qwen3_next+mtp", MTP, 1)])
def test_staged_host_kv_replays_graphs_token_identity(family, spec, layers, tiny_model_dir):
    """--kv-staging-layers with graphs: the host blocks of a replayed step are copied on the copy stream into
    the ring, a layer ahead, between the graphs the attention layers split the step into; a ring of one
    entry is rewritten between the layers of every step. Greedy tokens equal an eager run that reads the
    tier itself."""
    prompts = _prompts([40, 70, 25, 100])
    lengths = [60, 30, 80, 20]
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir(family), dtype="bfloat16", device="cuda", max_num_seqs=4, block_size=4,
                  kv_resident_tokens=16, kv_staging_layers=layers if graphs else 0, speculative_config=spec,
                  cuda_graphs=graphs)
        runner = llm.engine.runner
        host_replays = _count_host_replays(runner) if graphs else None
        runs[graphs] = _staggered(llm, prompts, lengths)
        if graphs:
            assert host_replays[0] >= 20 and runner.kv_staging.copied
        del llm, runner
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@gpu
@pytest.mark.parametrize("kv_cache_dtype", ["int8", "fp8"])
def test_staged_host_kv_of_8_bit_caches_token_identity(kv_cache_dtype, tiny_model_dir):
    """The ring of 8-bit KV (int8's scales staged beside it): greedy tokens equal an eager run that reads the
    tier itself."""
    prompts = _prompts([40, 70, 25, 100])
    lengths = [60, 30, 80, 20]
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir("qwen3_next"), dtype="bfloat16", device="cuda", max_num_seqs=4, block_size=4,
                  kv_resident_tokens=16, kv_staging_layers=1 if graphs else 0, kv_cache_dtype=kv_cache_dtype,
                  cuda_graphs=graphs)
        runs[graphs] = _staggered(llm, prompts, lengths)
        if graphs:
            assert llm.engine.runner.kv_staging.copied
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@gpu
@pytest.mark.parametrize("mixed", [True, False], ids=["one_mixed_graph", "graph_parts"])
@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "qwen3_next"])
def test_fresh_prompts_beside_running_requests_replay_graphs_token_identity(family, mixed, tiny_model_dir,
                                                                            monkeypatch):
    """Three slots for eight requests: most admissions run beside decoding requests. Such a step replays a graph
    of each prompt's padded length (16 to 128) and the windows' own, or with STRATA_MIXED_GRAPHS=1 one mixed
    graph (the decode rows, then the prompts padded to 32 to 128 tokens here); the
    greedy tokens equal those of a run without graphs. (No prompt of 63 or 64 tokens: beside decode rows it
    makes an eager step of more than 64 rows, which routes through the unfused MoE path, while its own
    64-row graph takes the fused routing; the two round differently, which flipped a token of the tiny
    random qwen3_moe on the H200.)"""
    if mixed:
        monkeypatch.setenv("STRATA_MIXED_GRAPHS", "1")
    prompts = _prompts([5, 40, 17, 100, 30, 12, 50, 7])
    lengths = [20, 6, 12, 9, 15, 4, 10, 8]
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir(family), dtype="bfloat16", device="cuda", max_num_seqs=3, block_size=4,
                  cuda_graphs=graphs)
        runs[graphs] = _staggered(llm, prompts, lengths)
        if graphs:
            runner = llm.engine.runner
            assert {(1, 16), (1, 32), (1, 64), (1, 128)} <= set(runner.graphs.graphs)
            assert runner.graph_mixed_steps > 0 if mixed else runner.graph_mixed_steps == 0 < runner.graph_part_steps
            assert not runner.graphs.eager_only
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@gpu
# llama's steps split so before; its drafts met no admission here
@pytest.mark.parametrize("family, method", [("qwen3_next", "suffix"), ("qwen3_next+mtp", "mtp")])
@pytest.mark.parametrize("mixed", [True, False], ids=["one_mixed_graph", "graph_parts"])
def test_fresh_prompts_beside_verification_windows_replay_graphs_token_identity(family, method, mixed, tiny_model_dir,
                                                                               monkeypatch):
    """Suffix drafts from prompts that repeat a pattern the tiny random model does not follow (or the MTP
    head's), so most drafts are rejected: fresh prompts admitted beside verification windows replay a prompt
    graph and a windows graph (or with STRATA_MIXED_GRAPHS=1 one mixed graph) instead of an eager step, on
    the hybrid model too, whose rollback
    reads the windows' per-token recurrent states by the step's row, and whose MTP head then drafts from a
    whole-step context; greedy tokens equal those of a run without graphs. A fixed draft length: the
    adaptive one follows measured step times, which graphs change."""
    from strata.runner import graph_parts

    if mixed:
        monkeypatch.setenv("STRATA_MIXED_GRAPHS", "1")
    prompts = [(p[:4] * 30)[:n] for p, n in zip(_prompts([5, 6, 7, 8, 9, 10, 11, 12]), [16, 40, 17, 100, 30, 24, 50, 20])]
    lengths = [20, 6, 12, 9, 15, 4, 10, 8]
    spec = {"method": method, "num_speculative_tokens": 3, "adaptive": False}
    split_with_windows = []
    forward_split = graph_parts.forward_split
    monkeypatch.setattr(graph_parts, "forward_split", lambda runner, plan: (
        lambda out: (split_with_windows.append(out is not None and runner._has_windows(plan)), out)[1])(
        forward_split(runner, plan)))
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir(family), dtype="bfloat16", device="cuda", max_num_seqs=3, block_size=4,
                  speculative_config=spec, cuda_graphs=graphs)
        runs[graphs] = _staggered(llm, prompts, lengths)
        if graphs:
            assert llm.engine.scheduler.stats.num_draft_tokens > 0
            assert (llm.engine.runner.graph_mixed_steps > 0) == mixed
        del llm
        torch.cuda.empty_cache()
    # the MTP case's one bf16 token (apart since session 20, also with the fused merge off) is checked for a near tie
    _equal_or_apart_at_a_near_tie(tiny_model_dir(family), prompts, runs)
    assert any(split_with_windows)


@gpu
@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "qwen3_next"])
def test_fresh_prompts_admitted_together_replay_one_graph_token_identity(family, tiny_model_dir, monkeypatch):
    """Six prompts admitted in one step replay one graph of six prompts padded to 32 tokens (the slot
    count is a prompt count of its own), and later admissions beside decoding requests group theirs
    too; greedy tokens equal those of a run without graphs. Qwen3-Next's recurrent layers stop each
    padded prompt's state after its real tokens."""
    from strata.runner.cuda_graphs import CudaGraphCache

    prompts = _prompts([5, 9, 17, 3, 30, 12, 20, 8, 25, 6])
    lengths = [6, 6, 10, 10, 14, 14, 9, 7, 11, 5]  # pairs finish together: their successors come in together
    replayed = []
    run = CudaGraphCache.run
    monkeypatch.setattr(CudaGraphCache, "run", lambda self, key, scheduled, *a, **k: (
        replayed.append((key, len(scheduled))), run(self, key, scheduled, *a, **k))[1])
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir(family), dtype="bfloat16", device="cuda", max_num_seqs=6, block_size=4,
                  cuda_graphs=graphs)
        replayed.clear()
        runs[graphs] = _staggered(llm, prompts, lengths)
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]
    assert replayed[0] == ((6, 32), 6)                                  # the first step: every prompt at once
    assert any(key[1] >= 16 and n > 1 for key, n in replayed[1:])      # later prompts also share a graph


@gpu
@pytest.mark.parametrize("capacity", [3, 1])
def test_graph_cache_evicts_and_recaptures_beyond_its_capacity(tiny_model_dir, capacity):
    """More layouts than the cache holds: the least recently used graph is released and re-captured
    when its layout comes back; output stays identical to the eager run throughout. With room for one
    graph, every capture releases the graph pool's last user (the next capture takes a new pool)."""
    prompts = _prompts([4, 6, 8, 10, 12, 14, 16, 18])
    lengths = [3, 6, 9, 12, 15, 18, 21, 24]  # batch sizes 8, 7, ..., 1: eight layouts
    folder = tiny_model_dir("qwen3_next")
    eager = LLM(folder, dtype="bfloat16", device="cuda", max_num_seqs=8, block_size=4, cuda_graphs=False)
    expected = _staggered(eager, prompts, lengths)
    del eager
    llm = LLM(folder, dtype="bfloat16", device="cuda", max_num_seqs=8, block_size=4,
              cuda_graph_cache_size=capacity)
    for round_ in range(2):
        assert _staggered(llm, prompts, lengths) == expected
        stats = llm.engine.runner.graph_stats()
        assert stats["cached"] <= capacity
        assert stats["evictions"] >= 5 * (round_ + 1)
        assert stats["captures"] == stats["evictions"] + stats["cached"]
    assert not llm.engine.runner.graphs.eager_only


@gpu
@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5_moe", "qwen4_exp"])
def test_gpu_float32_greedy_matches_hf_through_the_triton_paths(family, tiny_model_dir):
    """The hybrid families in float32 on the GPU: decode goes through the Triton Gated DeltaNet and
    attention kernels (head_dim 16 here; Qwen3.5's plain projection layout, Qwen4-Exp's sigmoid gate,
    hyper-connections, PLE and QSA past its budget); greedy tokens equal HF transformers' on the same weights."""
    from tests.tiny_models import build_hf_model

    prompts = _prompts([7, 19, 33])
    hf = build_hf_model(family).to("cuda")
    expected = [hf.generate(torch.tensor([p], device="cuda"), do_sample=False, max_new_tokens=24)[0, len(p):].tolist()
                for p in prompts]
    llm = LLM(tiny_model_dir(family), dtype="float32", device="cuda", max_num_seqs=4, block_size=4)
    assert _staggered(llm, prompts, [24, 24, 24]) == expected


def _qwen4_exp_within_budget(source: str, tmp_path) -> str:
    """A copy of a tiny Qwen4-Exp folder whose QSA budget (64 tokens) covers these tests' contexts: graphs run
    only steps that read a dense context (Qwen4ExpForCausalLM.graph_variant "")."""
    import json
    import shutil

    folder = tmp_path / "qwen4_exp"
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    config["indexer_budget"] = 64
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@gpu
@pytest.mark.parametrize("spec", [None, MTP], ids=["plain", "mtp"])
def test_qwen4_exp_graphs_run_dense_steps_and_keep_tokens(spec, tiny_model_dir, tmp_path):
    """Qwen4-Exp in bf16 with graphs: steps whose contexts are all within the QSA budget (64 here) replay
    graphs (the PLE table is on the GPU), longer ones run eagerly; tokens equal a run without graphs."""
    folder = _qwen4_exp_within_budget(tiny_model_dir("qwen4_exp+mtp"), tmp_path)
    prompts = _prompts([5, 9, 17, 3, 30, 12])
    lengths = [24, 8, 40, 30, 4, 12]
    runs = {}
    for graphs in (False, True):
        llm = LLM(str(folder), dtype="bfloat16", device="cuda", max_num_seqs=6, block_size=4,
                  speculative_config=spec, cuda_graphs=graphs)
        runs[graphs] = _staggered(llm, prompts, lengths)
        if graphs:
            assert llm.engine.runner.graph_stats()["replays"] > 0
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@gpu
@pytest.mark.parametrize("spec, options", [(None, {}), (MTP, {}),
                                           (None, {"kv_resident_tokens": 16})], ids=["plain", "mtp", "host_kv"])
def test_qwen4_exp_graphs_replay_steps_past_the_qsa_budget(spec, options, tiny_model_dir):
    """Past the QSA budget (8 tokens in the tiny model) decode and verification steps replay their layout's
    sparse variant, whose rows choose their blocks on the device; eager steps of short windows choose the same
    way, so the tokens equal a run without graphs. `host_kv`: KV beyond VRAM, the index keys of the first
    blocks read from the host tier."""
    from strata.model.qsa import SPARSE_VARIANT

    prompts = _prompts([5, 9, 17, 3, 30, 12])
    lengths = [24, 8, 40, 30, 4, 12]
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir("qwen4_exp+mtp"), dtype="bfloat16", device="cuda", max_num_seqs=6, block_size=4,
                  speculative_config=spec, cuda_graphs=graphs, **options)
        runs[graphs] = _staggered(llm, prompts, lengths)
        if graphs:
            keys = list(llm.engine.runner.graphs.graphs)
            # captured for steps of several slots (the warm-up ladder holds the one-slot decode variant)
            assert any(key[2:] == (SPARSE_VARIANT,) and key[:2] != (1, 1) for key in keys), keys
            assert llm.engine.runner.graph_stats()["replays"] > 0
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@gpu
def test_qwen4_exp_graphs_gather_a_host_ple_table_between_their_parts_or_in_place(tiny_model_dir, monkeypatch,
                                                                                 tmp_path):
    """With the PLE table left in host memory (as the real model's ~100 GB one is), decode steps still replay
    graphs. By default the table is page-locked and the device gathers the rows itself: no split. With
    STRATA_PLE_IN_PLACE=0 each graph ends after the layer's row ids, the host gathers the rows, the next part reads
    them. Tokens equal
    a run without graphs, either way."""
    from strata.weights import loader

    monkeypatch.setattr(loader, "HOST_TABLE_GPU_SHARE", 0.0)
    folder = _qwen4_exp_within_budget(tiny_model_dir("qwen4_exp"), tmp_path)
    prompts = _prompts([5, 9, 17, 3])
    lengths = [20, 8, 24, 12]
    runs = {}
    for in_place in (False, True):
        monkeypatch.setenv("STRATA_PLE_IN_PLACE", "1" if in_place else "0")
        for graphs in (False, True):
            llm = LLM(folder, dtype="bfloat16", device="cuda", max_num_seqs=4, block_size=4, cuda_graphs=graphs)
            tables = [m for m in llm.engine.runner.model.modules() if type(m).__name__ == "NGramEmbedding"]
            assert tables and {m.ngram_embedding.weight.device.type for m in tables} == {"cpu"}
            assert all(m.read_in_place == in_place for m in tables)
            runs[in_place, graphs] = _staggered(llm, prompts, lengths)
            if graphs:
                cache = llm.engine.runner.graphs
                assert cache.num_replays > 0
                splits = [c.graph.num_splits for c in cache.graphs.values()]
                assert all(n == 0 for n in splits) if in_place else all(n >= len(tables) for n in splits), splits
            del llm
            torch.cuda.empty_cache()
    assert runs[False, True] == runs[False, False] == runs[True, False] == runs[True, True]


@gpu
def test_model_that_does_not_fit_gets_a_clear_error(tiny_model_dir):
    from strata.runner.memory import ModelDoesNotFit

    with pytest.raises(ModelDoesNotFit, match=r"GiB.*gpu_memory_utilization"):
        LLM(tiny_model_dir("llama"), dtype="bfloat16", device="cuda", gpu_memory_utilization=1e-6)


@gpu
def test_programmatic_dependent_launch_on_off_token_identity(tiny_model_dir, monkeypatch):
    """Triton kernels launched with PDL (the default on Hopper) wait for the kernel before them: the
    greedy tokens equal those of a run without it, graphs on (the decode path) and mixed steps eager."""
    from strata.kernels import launch

    if not launch._pdl_supported(torch.cuda.current_device()):
        pytest.skip("PDL needs Hopper or later")
    prompts = _prompts([5, 9, 17, 3, 30, 12])
    lengths = [24, 8, 16, 30, 4, 12]
    runs = {}
    for pdl in (True, False):
        if not pdl:
            monkeypatch.setattr(launch, "_pdl_supported", lambda device_index: False)
        llm = LLM(tiny_model_dir("qwen3_moe"), dtype="bfloat16", device="cuda", max_num_seqs=6, block_size=4)
        runs[pdl] = _staggered(llm, prompts, lengths)
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@gpu
def test_fused_routing_and_folded_topk_sum_match_the_unfused_layers(tiny_model_dir):
    """Decode-sized steps route in one launch and fold the top-k sum into the next norm; a zero routing
    bias on every MoE block forces the unfused path (router linear, softmax_topk, fused_moe with its own
    sum). Greedy tokens agree, graphs on."""
    from strata.model.moe import MoEBlock

    prompts = _prompts([5, 9, 17])
    runs = []
    for unfused in (False, True):
        llm = LLM(tiny_model_dir("qwen3_moe"), dtype="bfloat16", device="cuda", max_num_seqs=4, block_size=4)
        blocks = [m for m in llm.engine.runner.model.modules() if isinstance(m, MoEBlock)]
        assert blocks
        if unfused:
            for block in blocks:
                block.routing_bias = torch.zeros(block.gate.weight.shape[0], dtype=torch.bfloat16, device="cuda")
        runs.append(_staggered(llm, prompts, [16, 16, 16]))
        del llm
        torch.cuda.empty_cache()
    assert runs[0] == runs[1]
