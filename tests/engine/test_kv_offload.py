"""KV beyond VRAM (`--kv-resident-tokens N`): each sequence keeps its newest N tokens' KV on the device and
its older blocks in the host tier, where attention reads them. Greedy output must equal the all-resident
run's exactly (float32, CPU: the same operands in the same order), for attention-only and hybrid models, with
several sequences of different lengths at once, prefix reuse (device cache and parked conversation cache),
suffix and MTP speculation, int8 KV and preemption; device blocks are really freed; bad input is refused
with the numbers."""

from __future__ import annotations

import pytest
import torch

from strata import LLM, SamplingParams
from strata.cache.host_kv import HostKVPool
from strata.cache.pools import KVPool
from strata.runner.kv_staging import HostKVStaging
from strata.types import Request, ScheduledSlot

BLOCK = 4
WINDOW = 16  # resident tokens: the contexts below reach 4x and more
PROMPTS = [[5, 9, 13, 2, 7] * 10, list(range(3, 40)), [11, 4] * 25, [60, 7, 33, 21] * 2]
GREEDY = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)


def _generate(llm: LLM, prompts=PROMPTS, params=GREEDY) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]


def _llm(folder: str, **options) -> LLM:
    return LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=BLOCK, **options)


@pytest.fixture(scope="module")
def expected(tiny_model_dir):
    """family -> the all-resident greedy outputs of PROMPTS (one engine per family)."""
    cache = {}

    def get(family: str):
        if family not in cache:
            cache[family] = _generate(_llm(tiny_model_dir(family)))
        return cache[family]

    return get


@pytest.mark.parametrize("family", ["llama", "qwen3_next", "qwen4_exp"])
def test_greedy_output_equals_all_resident_with_concurrent_sequences(family, tiny_model_dir, expected):
    llm = _llm(tiny_model_dir(family), kv_resident_tokens=WINDOW)
    moved = _count_moves(llm)
    assert _generate(llm) == expected(family)
    assert moved[0] >= 3 * (len(PROMPTS[0]) + 30 - WINDOW) // BLOCK // 4  # the long ones really went to host
    scheduler = llm.engine.scheduler
    assert scheduler.allocator.num_blocks == 4 * (WINDOW // BLOCK + 1)  # the plan: the window + a block a slot
    assert scheduler.offload.host.num_free == scheduler.offload.host.num_blocks  # all given back


def _count_moves(llm: LLM) -> list[int]:
    """A counter of blocks moved to the host tier (wraps the scheduler's KVOffload.move)."""
    offload, count = llm.engine.scheduler.offload, [0]
    move = offload.move

    def counted(state, num_new):
        pairs = move(state, num_new)
        count[0] += len(pairs)
        return pairs

    offload.move = counted
    return count


def test_device_blocks_are_freed_as_a_sequence_grows(tiny_model_dir):
    llm = _llm(tiny_model_dir("llama"), kv_resident_tokens=WINDOW)
    engine, scheduler = llm.engine, llm.engine.scheduler
    engine.add_request(Request("long", PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)))
    state = scheduler.requests["long"]
    seen_host = 0
    while engine.has_unfinished():
        engine.step()
        if state.slot_id is None:
            break
        # the device holds only the window (+ a block), the host tier everything before it, in order
        assert len(state.block_ids) <= WINDOW // BLOCK + 1
        assert state.num_blocks * BLOCK >= state.num_computed_tokens
        assert scheduler.allocator.num_free == scheduler.allocator.num_blocks - len(state.block_ids)
        assert scheduler.offload.host.num_free == scheduler.offload.host.num_blocks - len(state.host_block_ids)
        seen_host = max(seen_host, len(state.host_block_ids))
    assert seen_host * BLOCK >= 3 * WINDOW  # a context of 4x the window, three quarters of it on the host
    assert scheduler.offload.host.num_free == scheduler.offload.host.num_blocks


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_prefix_reuse_and_the_conversation_cache_read_host_blocks_exactly(family, tiny_model_dir, expected):
    """Prompts sharing long prefixes with finished ones: matched blocks older than the window go to the
    host tier from the device cache (a pool larger than the windows keeps them there), or, from the
    planned pool of four windows that evicted them, from the conversation cache's parked rows."""
    follow_ups = [p + o[:10] for p, o in zip(PROMPTS, expected(family))]
    reference = _generate(_llm(tiny_model_dir(family)), follow_ups)
    for options in ({"num_gpu_blocks": 200}, {"conversation_cache_mib": 8}):
        llm = _llm(tiny_model_dir(family), kv_resident_tokens=WINDOW, **options)
        assert _generate(llm) == expected(family)
        assert _generate(llm, follow_ups) == reference
        assert llm.engine.scheduler.cache_stats.prefix_hits >= 3
    assert llm.engine.scheduler.cache_stats.blocks_restored > 0  # the second engine read parked blocks


@pytest.mark.parametrize("family,method", [("llama", "suffix"), ("qwen3_next+mtp", "mtp")])
def test_speculation_with_host_blocks_keeps_greedy_output(family, method, tiny_model_dir):
    folder = tiny_model_dir(family)
    reference = _generate(_llm(folder))
    spec = {"method": method, "num_speculative_tokens": 3}
    llm = _llm(folder, kv_resident_tokens=WINDOW, speculative_config=spec)
    assert _generate(llm) == reference
    assert llm.engine.scheduler.stats.num_draft_tokens > 0


def test_int8_kv_scales_go_to_the_host_tier_with_their_blocks(tiny_model_dir):
    folder = tiny_model_dir("llama")
    reference = _generate(_llm(folder, kv_cache_dtype="int8"))
    llm = _llm(folder, kv_cache_dtype="int8", kv_resident_tokens=WINDOW)
    assert _generate(llm) == reference
    host = llm.engine.runner.host_kv.caches
    assert any(isinstance(key, tuple) and key[0] == "kv_scale" for key in host)


def test_preemption_with_a_small_device_pool_keeps_output(tiny_model_dir, expected, monkeypatch):
    """Fewer device blocks than four windows and small prompt chunks (so requests are admitted, then grow):
    requests are preempted (host blocks freed with the rest) and recomputed, the output unchanged."""
    from strata.scheduler.scheduler import Scheduler

    preempted = []
    preempt = Scheduler._preempt
    monkeypatch.setattr(Scheduler, "_preempt", lambda self, state: (preempted.append(state), preempt(self, state)))
    llm = _llm(tiny_model_dir("llama"), kv_resident_tokens=WINDOW, num_gpu_blocks=12, max_num_batched_tokens=6)
    assert _generate(llm) == expected("llama")
    assert preempted
    scheduler = llm.engine.scheduler
    assert scheduler.offload.host.num_free == scheduler.offload.host.num_blocks
    assert scheduler.allocator.num_free == scheduler.allocator.num_blocks


def test_bad_input_is_refused_with_the_numbers(tiny_model_dir):
    from strata.config import CacheConfig

    with pytest.raises(ValueError, match="smaller than one KV block"):
        CacheConfig(block_size=16, kv_resident_tokens=8)
    with pytest.raises(ValueError, match="must not be negative"):
        CacheConfig(kv_resident_tokens=-1)
    with pytest.raises(ValueError, match=r"host KV tier holds 0 blocks .* raise --kv-host-mib"):
        _llm(tiny_model_dir("llama"), kv_resident_tokens=WINDOW, kv_host_mib=0, max_model_len=256)


def test_the_memory_plan_sizes_the_device_pool_by_the_window_and_prints_the_host_tier():
    import torch

    from strata.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig, SpecConfig
    from strata.engine.memory_plan import MemoryPlan

    cfg = ModelConfig(architecture="LlamaForCausalLM", vocab_size=64, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8)

    def plan(device="cpu", **cache):
        config = EngineConfig(model="x", cache=CacheConfig(block_size=16, **cache),
                              scheduler=SchedulerConfig(max_num_seqs=8))
        return MemoryPlan(config, cfg, SpecConfig(method="suffix", num_speculative_tokens=3), 4096, device,
                          torch.bfloat16, False, {})

    resident = plan().cache_sizes()
    assert (resident.num_kv_blocks, resident.num_host_kv_blocks) == (8 * 4096 // 16, 0)
    offload = plan(kv_resident_tokens=512)
    sizes = offload.cache_sizes()
    # per slot: 512 tokens + 3 drafts in blocks of 16, + a block; the host tier: the rest of 4096 tokens a slot
    assert sizes.num_kv_blocks == 8 * (33 + 1) and sizes.num_host_kv_blocks == 8 * (4096 - 512) // 16
    offload.numbers.update(allowed_bytes=2**34, total_bytes=2**35, in_use_after_weights_bytes=2**30)
    assert f"host KV tier ({8 * 224} blocks in pinned host RAM beyond the newest 512 tokens a slot)" in \
        offload.table(sizes.num_kv_blocks)
    one_sequence = (4096 - 512) // 16 * offload.block_bytes
    assert plan(kv_resident_tokens=512, kv_host_mib=-(-one_sequence // 2**20)).cache_sizes().num_host_kv_blocks >= 224
    with pytest.raises(ValueError, match=r"fewer than one sequence of max_model_len=4096 moves there beyond "
                                         r"kv_resident_tokens=512 \(224 blocks"):
        plan(kv_resident_tokens=512, num_gpu_blocks=10**4, kv_host_mib=0).cache_sizes()
    # --kv-staging-layers: a ring entry holds one sequence's host blocks at max_model_len; at most the model's layers
    assert plan(kv_resident_tokens=512, kv_staging_layers=1).cache_sizes().kv_staging == (1, 224 + 1)
    assert plan(kv_resident_tokens=512, kv_staging_layers=5).cache_sizes().kv_staging == (2, 224 + 1)
    assert plan(kv_resident_tokens=512).cache_sizes().kv_staging == (0, 0)
    # --kv-staging-tokens: several long sequences' host blocks in one entry
    assert plan(kv_resident_tokens=512, kv_staging_layers=1, kv_staging_tokens=4 * 3584).cache_sizes().kv_staging \
        == (1, 4 * 224)
    with pytest.raises(ValueError, match="kv_staging_tokens=8: a ring entry holds at least one block"):
        plan(kv_resident_tokens=512, kv_staging_layers=1, kv_staging_tokens=8)
    on_gpu = plan("cuda", kv_resident_tokens=512, kv_staging_layers=1)  # the device pools count the ring
    assert on_gpu.pools["KV staging ring (1 layers x 225 blocks)"] == 225 * on_gpu.block_bytes // 2


@pytest.mark.gpu
@pytest.mark.parametrize("kv_dtype", ["auto", "int8", "fp8"])
def test_cuda_prompt_chunks_read_host_blocks_like_all_resident(kv_dtype, tiny_model_dir):
    """On CUDA, prompt chunks longer than the kernel's windows (24 tokens here) attend through the torch
    path, which copies each sequence's host blocks to the device run by run (attention._host_blocks) and
    dequantizes them there; with small chunks most of each prompt's context is in the host tier by its
    last chunks. Greedy output equals the all-resident run (float32 model; the same KV dtype both)."""
    import torch

    def run(**options):
        llm = LLM(tiny_model_dir("qwen3_next"), dtype="float32", device="cuda", max_num_seqs=4, block_size=BLOCK,
                  max_num_batched_tokens=24, kv_cache_dtype=kv_dtype, cuda_graphs=False, **options)
        moved = _count_moves(llm) if "kv_resident_tokens" in options else [0]
        out = _generate(llm, [p * 3 for p in PROMPTS])
        del llm
        torch.cuda.empty_cache()
        return out, moved[0]

    reference, _ = run()
    windowed, moved = run(kv_resident_tokens=WINDOW)
    assert moved > 0
    assert windowed == reference


def _count_staged(llm: LLM) -> dict[str, int]:
    """Counters of the runner's staging (runner/kv_staging.py): steps staged, steps that did not fit the ring
    (run on the tier itself), and host blocks copied into the ring."""
    staging, counts = llm.engine.runner.kv_staging, {"staged": 0, "unstaged": 0, "blocks": 0}
    begin = staging.begin

    def counted(scheduled, tables):
        rows = begin(scheduled, tables)
        counts["unstaged" if rows is None else "staged"] += 1
        counts["blocks"] += sum(map(len, (rows or {}).values()))
        return rows

    staging.begin = counted
    return counts


@pytest.mark.parametrize("family, options", [
    ("llama", {}), ("qwen3_next", {}), ("llama", {"kv_cache_dtype": "int8"}),
    ("qwen3_next+mtp", {"speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}), ("qwen3_next+mtp", {})])
@pytest.mark.parametrize("layers, max_model_len, tokens", [(1, None, None), (2, None, None), (1, 96, None),
                                                           (1, 96, 4 * 80)])
def test_staged_host_blocks_give_the_all_resident_output(family, options, layers, max_model_len, tokens,
                                                         tiny_model_dir):
    """--kv-staging-layers: each step's host blocks are copied into a ring of `layers` attention layers' entries,
    one layer ahead of its attention, and read there at ring rows; the MTP layer's entry comes last. With
    max_model_len 96 an entry holds 21 blocks, fewer than four long sequences have in the tier at once: those
    steps read the tier itself, the rest are staged; --kv-staging-tokens 320 makes room for all four. Greedy
    output equals all-resident either way."""
    folder = tiny_model_dir(family)
    limits = {} if max_model_len is None else {"max_model_len": max_model_len}
    reference = _generate(_llm(folder, **options, **limits))
    llm = _llm(folder, kv_resident_tokens=WINDOW, kv_staging_layers=layers, kv_staging_tokens=tokens, **options,
               **limits)
    staging, cfg = llm.engine.runner.kv_staging, llm.engine.runner.model.config
    assert staging.ring_size == layers and len(staging.ring) == layers
    # the MTP layer's blocks are staged only when it drafts (its KV is never read otherwise)
    assert staging.layers == cfg.full_attention_layers + ([cfg.num_hidden_layers] if "speculative_config" in options else [])
    counts = _count_staged(llm)
    assert _generate(llm) == reference
    assert counts["staged"] > 0 and counts["blocks"] > 0
    # steps find their first layers' copies made in the step before (same blocks, none written since); not
    # with MTP drafting: the MTP layer's entry is read after the step's forward, so no copy is made ahead
    if "speculative_config" not in options:
        assert 0 < staging.reused <= counts["staged"] * layers
    if tokens is not None:
        assert staging.capacity == tokens // BLOCK and counts["unstaged"] == 0
    elif max_model_len is not None:
        assert staging.capacity == (96 - WINDOW) // BLOCK + 1 and counts["unstaged"] > 0


def test_a_copy_made_ahead_is_kept_only_for_the_same_blocks_unwritten():
    """The last layer's release refills the first layer's ring entry for the next step with this step's blocks;
    the next step keeps that copy only if its rows are the same blocks and none of them was written since
    (an offload into a block the copy read, or the slot's blocks changed): otherwise it copies afresh."""
    kv = KVPool([0, 1], num_blocks=4, block_size=2, num_kv_heads=1, head_dim=2, dtype=torch.float32, device="cpu")
    tier = HostKVPool(kv, num_blocks=6)
    staging = HostKVStaging(tier, [0, 1], ring_size=1, capacity=4, device="cpu")
    slot = ScheduledSlot(slot_id=0, num_computed_tokens=8, num_new_tokens=1, new_block_ids=[], token_ids=[1])

    def step(host_blocks):  # one step's hooks in forward order; -> what layer 0 read from the ring
        staging.begin([slot], {0: host_blocks})
        staging.start()
        seen = staging.view[0][0][:len(host_blocks)].clone()
        staging.after_attention(0)
        staging.after_attention(1)
        staging.end()
        return seen

    def fill(block, value):  # a device block offloaded into host block `block`
        kv.caches[0][0][0].fill_(value)
        tier.offload([(0, block)])

    fill(2, 1.0)
    fill(3, 2.0)
    assert step([2, 3]).flatten().tolist() == [1.0] * 4 + [2.0] * 4 and staging.reused == 0
    assert step([2, 3])[1].flatten().tolist() == [2.0] * 4 and staging.reused == 1  # kept
    fill(4, 3.0)  # a new block, not one the copy read: kept, then the slot's blocks grow: copied afresh
    assert step([2, 3])[0].flatten().tolist() == [1.0] * 4 and staging.reused == 2
    assert step([2, 3, 4])[2].flatten().tolist() == [3.0] * 4 and staging.reused == 2
    fill(3, 5.0)  # a block the copy made ahead read, written since (freed and handed on): copied afresh
    assert step([2, 3, 4])[1].flatten().tolist() == [5.0] * 4 and staging.reused == 2
    assert step([2, 3, 4])[1].flatten().tolist() == [5.0] * 4 and staging.reused == 3


def test_staging_refuses_what_it_cannot_stage(tiny_model_dir):
    with pytest.raises(ValueError, match="kv_staging_layers=1: staging needs KV beyond VRAM"):
        _llm(tiny_model_dir("llama"), kv_staging_layers=1)
    with pytest.raises(ValueError, match="KV staging takes attention K/V"):  # QSA's index keys ride in the blocks
        _llm(tiny_model_dir("qwen4_exp"), kv_resident_tokens=WINDOW, kv_staging_layers=1)
