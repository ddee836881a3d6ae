"""--expert-cache auto: every routed expert when the model fits beside a KV reserve and the step
headroom, otherwise as many as the rest of the memory holds (pure arithmetic, and through the engine
with a stated GPU budget)."""

from __future__ import annotations

import math

import pytest
import torch

from strata.config import EngineConfig, ExpertConfig, SchedulerConfig, SpecConfig
from strata.engine.memory_plan import MemoryPlan
from strata.model.registry import model_class
from strata.runner.memory import GiB, GpuBudget, WeightSizes, auto_expert_slots, kv_reserve_tokens, meta_model, \
    weight_sizes
from strata.weights.source import open_source

TINY_MOE = ("random:qwen3-30b-a3b?num_hidden_layers=2&hidden_size=128&intermediate_size=256&moe_intermediate_size=64"
            "&num_attention_heads=4&num_key_value_heads=2&head_dim=32&num_experts=16&num_experts_per_tok=4"
            "&vocab_size=1000")


def test_auto_expert_slots_arithmetic():
    sizes = WeightSizes(total=10 * GiB, experts=8 * GiB, num_experts=800)  # 2 GiB dense, 800 experts of ~10 MiB
    per_expert = sizes.experts // sizes.num_experts
    assert auto_expert_slots(sizes, 20 * GiB, GiB, GiB, staging_slots=64) == 800   # fits: all, no staging taken
    room = 6 * GiB - 2 * GiB - GiB - GiB
    assert auto_expert_slots(sizes, 6 * GiB, GiB, GiB, staging_slots=0) == room // per_expert
    assert auto_expert_slots(sizes, 6 * GiB, GiB, GiB, staging_slots=10) == room // per_expert - 10
    assert auto_expert_slots(sizes, 3 * GiB, GiB, GiB, staging_slots=0) == 0       # not even the dense part
    assert auto_expert_slots(WeightSizes(GiB, 0, 0), GiB, 0, 0, 0) == 0              # a dense model


def test_kv_reserve_covers_the_slots_up_to_a_cap_and_one_full_sequence():
    assert kv_reserve_tokens(max_model_len=2048, max_num_seqs=8) == 8 * 2048
    assert kv_reserve_tokens(max_model_len=32768, max_num_seqs=8) == 8 * 4096
    assert kv_reserve_tokens(max_model_len=65536, max_num_seqs=1) == 65536


def _plan_with_budget(monkeypatch, available: int, **experts) -> tuple[MemoryPlan, WeightSizes]:
    config = EngineConfig(model=TINY_MOE, scheduler=SchedulerConfig(max_num_seqs=2, max_model_len=256),
                          experts=ExpertConfig(**experts))
    cfg = open_source(TINY_MOE).model_config()
    meta = meta_model(model_class(cfg), cfg)  # the planning step alone: no model is built
    plan = MemoryPlan(config, cfg, config.speculative, 256, "cuda", torch.bfloat16, meta.has_mtp,
                      meta.recurrent_state_shapes())
    monkeypatch.setattr(plan, "_budget", lambda: GpuBudget(80 * GiB, 72 * GiB, 72 * GiB - available))
    return plan, weight_sizes(meta, torch.bfloat16)


def test_engine_gives_auto_experts_what_the_budget_leaves(monkeypatch):
    def slots(available: int, pcie_frac: str = "0", stream: int = 0) -> int:
        plan, sizes = _plan_with_budget(monkeypatch, available, pcie_frac=pcie_frac, prompt_stream_min_pairs=stream)
        return plan._auto_expert_slots(sizes)

    _, sizes = _plan_with_budget(monkeypatch, 0)
    per_expert = sizes.experts // sizes.num_experts
    assert slots(64 * GiB) == sizes.num_experts and slots(0) == 0
    low, high = 0, 64 * GiB  # the least memory that gives one slot
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if slots(mid) == 0 else (low, mid)
    assert slots(high) == 1
    # then one more slot per expert's bytes, until every expert fits
    assert [slots(high + k * per_expert) for k in range(sizes.num_experts)] == list(range(1, sizes.num_experts + 1))
    # PCIe staging slots (decode staging or prompt streaming) are set aside from a partial cache
    half = high + (sizes.num_experts // 2) * per_expert
    assert slots(half, pcie_frac="0.5") == slots(half, stream=32) < slots(half)


def _plan_on_card(monkeypatch, spec: str, card_gib: int, host_gib: int) -> tuple[MemoryPlan, torch.nn.Module]:
    """The engine's plan for `spec` at its default settings on a card of `card_gib` (0.5 GiB already in use)
    beside `host_gib` of free host RAM."""
    from strata.engine import memory_plan

    config = EngineConfig(model=spec)
    cfg = open_source(spec).model_config()
    meta = meta_model(model_class(cfg), cfg)
    plan = MemoryPlan(config, cfg, config.speculative, cfg.max_position_embeddings, "cuda", torch.bfloat16,
                      meta.has_mtp, meta.recurrent_state_shapes())
    allowed = int(card_gib * GiB * config.runner.gpu_memory_utilization)
    monkeypatch.setattr(plan, "_budget", lambda: GpuBudget(card_gib * GiB, allowed, GiB // 2))
    monkeypatch.setattr(memory_plan, "host_available_bytes", lambda: host_gib * GiB)
    return plan, meta


def test_qwen3_next_80b_at_q4_k_m_fits_a_24_gb_card_and_64_gb_of_ram(monkeypatch):
    """Issue 23's planner case: the Q4_K_M plan (packed bytes) fits, with at least 3.5x the device experts of
    the bf16 plan, whose experts do not even fit in host RAM. Numbers in docs/benchmarks.md."""
    from strata.runner.memory import ModelDoesNotFit
    from strata.weights.loaded_sizes import scheme_sizes

    spec = "random:qwen3-next-80b-a3b"
    packed, dense = scheme_sizes(spec, "q4_k_m", torch.bfloat16), scheme_sizes(spec, "bf16", torch.bfloat16)
    plan, meta = _plan_on_card(monkeypatch, spec, 24, 64)
    experts, device = plan.expert_slots(meta, packed)
    assert device == "cpu" and 0 < plan.auto_expert_slots < packed.num_experts == 49 * 512  # 48 layers + MTP
    assert plan.auto_expert_slots >= 3.5 * plan._auto_expert_slots(dense)
    assert packed.experts < 64 * GiB < dense.experts
    with pytest.raises(ModelDoesNotFit, match="host RAM"):
        _plan_on_card(monkeypatch, spec, 24, 64)[0].expert_slots(meta, dense)


def test_qwen4_exp_125b_at_2_and_3_bits_fits_a_24_gb_card_and_64_gb_of_ram(monkeypatch):
    """The seed's model on the machine its users have: at Q2_K (46.7 GiB of experts) and Q3_K_M (59.4 GiB) the
    plan fits a 24 GB card beside 64 GB of host RAM, some experts on the card and the rest in host RAM, the
    PLE table (26.9 GiB here) read from the file's pages, counted neither on the card nor in RAM; at Q4_K_M
    (76.7 GiB of experts) the experts do not fit in host RAM.
    Packed Q2_K / Q3_K experts are what make it fit: dequantized, they would take ~4x their packed bytes."""
    from strata.runner.memory import ModelDoesNotFit
    from strata.weights.loaded_sizes import scheme_sizes

    spec = "random:qwen4exp-125b"
    for scheme in ("q2_k", "q3_k_m"):
        sizes = scheme_sizes(spec, scheme, torch.bfloat16)
        assert sizes.mapped > 20 * GiB and sizes.host == 0 and sizes.total < 64 * GiB  # the table: the file's pages
        plan, meta = _plan_on_card(monkeypatch, spec, 24, 64)
        experts, device = plan.expert_slots(meta, sizes)
        assert device == "cpu" and 0 < plan.auto_expert_slots < sizes.num_experts, scheme
        assert sizes.experts < 64 * GiB
    q4_k_m = scheme_sizes(spec, "q4_k_m", torch.bfloat16)
    assert q4_k_m.experts > 64 * GiB
    with pytest.raises(ModelDoesNotFit, match="host RAM"):
        _plan_on_card(monkeypatch, spec, 24, 64)[0].expert_slots(meta, q4_k_m)


def test_scheme_sizes_are_what_the_written_file_loads(tmp_path):
    from strata.weights.gguf_export import export_gguf
    from strata.weights.gguf_source import GGUFSource
    from strata.weights.loaded_sizes import scheme_sizes

    spec = ("random:qwen3-30b-a3b?num_hidden_layers=8&hidden_size=256&intermediate_size=512&moe_intermediate_size=256"
            "&num_attention_heads=4&num_key_value_heads=2&head_dim=64&num_experts=4&vocab_size=512")
    path = str(tmp_path / "q4km.gguf")
    export_gguf(spec, path, "q4_k_m")
    assert scheme_sizes(spec, "q4_k_m", torch.bfloat16) == GGUFSource(path).weight_sizes(torch.bfloat16)


def test_qwen4_exp_plan_keeps_the_ple_table_in_host_ram_and_counts_index_keys(monkeypatch):
    """The 125B Qwen4-Exp in bf16: its PLE table (320M rows x 160, 95 GiB) is host memory (not device weights, and its host
    bytes are checked), and each KV block also holds QSA's index keys."""
    from strata.runner.memory import ModelDoesNotFit

    spec = "random:qwen4exp-125b"
    plan, meta = _plan_on_card(monkeypatch, spec, 48, 512)
    sizes = weight_sizes(meta, torch.bfloat16)
    table = meta.model.layers[0].ple.ple_embedding.ngram_embedding.weight
    assert sizes.host == table.numel() * 2 > 90 * GiB
    assert sizes.total == (sum(p.numel() for p in meta.parameters()) - table.numel()) * 2
    cfg = meta.config
    kv_only = 2 * (len(cfg.full_attention_layers) + 1) * 16 * cfg.num_key_value_heads * cfg.head_dim * 2
    assert plan.block_bytes == kv_only + len(cfg.full_attention_layers) * 16 * cfg.indexer_head_dim * 2
    plan.expert_slots(meta, sizes)  # 512 GiB of RAM holds the offloaded experts and the table
    with pytest.raises(ModelDoesNotFit, match="PLE"):
        _plan_on_card(monkeypatch, spec, 48, 300)[0].expert_slots(meta, sizes)


@pytest.mark.parametrize("spec", ["random:qwen3-next-80b-a3b", "random:qwen3.6-35b-a3b",
                                  "random:qwen4exp-125b?ple_layer_ids=none"])
@pytest.mark.parametrize("card_gib", [24, 32, 48])
def test_q4_k_m_plans_fit_consumer_cards_with_every_device_pool_counted(monkeypatch, spec, card_gib):
    """Issue 26: the whole plan on 24 / 32 / 48 GB cards at the engine's defaults (auto expert cache, the
    model's full context, graphs on): the weights it keeps on the card, the KV pool, the slots' recurrent
    states and their checkpoints (computed here from the model's state shapes), the graph pool estimate
    and the step headroom add up to no more than the allowance, and the KV pool holds a full-length
    sequence. A plan without the state pools would hand their bytes to the KV pool."""
    from strata.weights.loaded_sizes import scheme_sizes

    plan, meta = _plan_on_card(monkeypatch, spec, card_gib, 256)
    sizes = scheme_sizes(spec, "q4_k_m", torch.bfloat16)
    plan.expert_slots(meta, sizes)
    resident = plan.auto_expert_slots
    assert 0 < resident <= sizes.num_experts
    allowed = int(card_gib * GiB * plan.config.runner.gpu_memory_utilization)
    in_use = GiB // 2 + sizes.on_device(resident)  # what the device holds once the weights are loaded
    monkeypatch.setattr(plan, "_budget", lambda: GpuBudget(card_gib * GiB, allowed, in_use))
    cache = plan.cache_sizes()

    state_row = sum(math.prod(conv) * 2 + math.prod(ssm) * 4 for conv, ssm in meta.recurrent_state_shapes().values())
    assert state_row > 0 and cache.num_checkpoints == plan.config.cache.checkpoint_pool_size
    states = (plan.config.scheduler.max_num_seqs + 1) * state_row + cache.num_checkpoints * state_row
    graphs = plan.pools["CUDA graph pool (estimate)"]
    assert graphs > 0
    kv = cache.num_kv_blocks * plan.block_bytes
    assert in_use + kv + states + graphs + plan.headroom <= allowed
    assert cache.num_kv_blocks * plan.config.cache.block_size >= cache.max_model_len >= 4096
    table = plan.table(cache.num_kv_blocks)
    for row in ("recurrent states", "state checkpoints", "CUDA graph pool", "KV cache", f"GPU {card_gib:.1f} GiB"):
        assert row in table


def test_gpu_memory_limit_plans_for_a_smaller_card(monkeypatch):
    """--gpu-memory-limit-mib: a 24 GB card simulated on an 80 GB one; what is in use counts in full."""
    from strata.runner import memory

    monkeypatch.setattr(memory.torch.cuda, "mem_get_info", lambda: (70 * GiB, 80 * GiB))
    budget = memory.measure_budget(0.9, 512, limit_mib=24 * 1024)
    assert budget.total == 24 * GiB and budget.allowed == int(24 * GiB * 0.9) - 512 * 2**20
    assert budget.in_use == 10 * GiB and budget.available == budget.allowed - 10 * GiB
    assert memory.measure_budget(0.9, 0).total == 80 * GiB
    with pytest.raises(ValueError, match="gpu_memory_limit_mib"):
        memory.measure_budget(0.9, 0, limit_mib=-1)


def test_without_max_model_len_the_plan_sizes_the_context_from_the_kv_pool(monkeypatch):
    """Issue 26: no --max-model-len on CUDA: the auto expert cache reserves KV for 32K-token contexts, not
    Qwen3-Next's 262K (more experts on a 24 GB card), and max_model_len becomes what the KV pool then holds,
    capped at the model's maximum; an explicit --max-model-len is kept and reserved for as before."""
    from strata.engine import memory_plan
    from strata.weights.loaded_sizes import scheme_sizes

    spec = "random:qwen3-next-80b-a3b"
    sizes = scheme_sizes(spec, "q4_k_m", torch.bfloat16)
    sized, meta = _plan_on_card(monkeypatch, spec, 24, 256)
    sized.expert_slots(meta, sizes)
    model_max = meta.config.max_position_embeddings
    explicit = MemoryPlan(EngineConfig(model=spec, scheduler=SchedulerConfig(max_model_len=model_max)), meta.config,
                          SpecConfig(), model_max, "cuda", torch.bfloat16, meta.has_mtp, meta.recurrent_state_shapes())
    monkeypatch.setattr(explicit, "_budget", sized._budget)
    monkeypatch.setattr(memory_plan, "host_available_bytes", lambda: 256 * GiB)
    explicit.expert_slots(meta, sizes)
    assert sized.sized_context and not explicit.sized_context
    assert sized.auto_expert_slots > explicit.auto_expert_slots
    allowed = sized._budget().allowed

    def after_load(plan):
        in_use = GiB // 2 + sizes.on_device(plan.auto_expert_slots)
        monkeypatch.setattr(plan, "_budget", lambda: GpuBudget(24 * GiB, allowed, in_use))
        return plan.cache_sizes()

    cache = after_load(sized)
    kv_tokens = cache.num_kv_blocks * sized.config.cache.block_size
    assert 4096 <= cache.max_model_len == min(model_max, kv_tokens) < model_max
    assert sized.as_dict()["max_model_len"] == cache.max_model_len
    assert after_load(explicit).max_model_len == model_max
    # a card whose KV room holds less than 4,096 tokens after the weights: the error names the floor
    monkeypatch.setattr(sized, "_budget", lambda: GpuBudget(24 * GiB, allowed, allowed - sized.set_aside))
    with pytest.raises(memory_plan.ModelDoesNotFit, match="max_model_len=4096"):
        sized.cache_sizes()


def test_kv_cache_mib_sizes_the_pool_and_leaves_the_rest_to_experts(monkeypatch):
    """--kv-cache-mib (vLLM's --kv-cache-memory-bytes) on a 24 GB card: the auto expert cache reserves that much KV
    (not the default 32K-token contexts), so a small pool leaves room for more experts; the pool gets exactly it
    (capped at every slot at max_model_len), the context is sized from it; more than the card leaves is a clear
    error. On the CPU a size too small for one sequence of an explicit max_model_len is one too."""
    from strata.config import CacheConfig
    from strata.engine import memory_plan
    from strata.weights.loaded_sizes import scheme_sizes

    spec = "random:qwen3-next-80b-a3b"
    sizes = scheme_sizes(spec, "q4_k_m", torch.bfloat16)
    default, meta = _plan_on_card(monkeypatch, spec, 24, 256)
    default.expert_slots(meta, sizes)

    def asked(mib: int | None, device: str = "cuda", max_model_len: int | None = None) -> MemoryPlan:
        config = EngineConfig(model=spec, cache=CacheConfig(kv_cache_mib=mib),
                              scheduler=SchedulerConfig(max_model_len=max_model_len))
        plan = MemoryPlan(config, meta.config, SpecConfig(), max_model_len or meta.config.max_position_embeddings,
                          device, torch.bfloat16, meta.has_mtp, meta.recurrent_state_shapes())
        monkeypatch.setattr(plan, "_budget", default._budget)
        return plan

    small = asked(256)
    small.expert_slots(meta, sizes)
    assert small.auto_expert_slots > default.auto_expert_slots
    in_use = GiB // 2 + sizes.on_device(small.auto_expert_slots)
    monkeypatch.setattr(small, "_budget", lambda: GpuBudget(24 * GiB, default._budget().allowed, in_use))
    cache = small.cache_sizes()
    assert cache.num_kv_blocks == 256 * 2**20 // small.block_bytes
    assert cache.max_model_len == cache.num_kv_blocks * small.config.cache.block_size
    huge = asked(64 * 1024)
    monkeypatch.setattr(huge, "_budget", lambda: GpuBudget(24 * GiB, default._budget().allowed, in_use))
    with pytest.raises(memory_plan.ModelDoesNotFit, match="--kv-cache-mib 65536 asks 64.00 GiB.*are left"):
        huge.cache_sizes()
    on_cpu = asked(1, "cpu", max_model_len=32768)
    with pytest.raises(ValueError, match="fewer than one sequence of max_model_len=32768 .*raise kv_cache_mib"):
        on_cpu.cache_sizes()
    longest = meta.config.max_position_embeddings  # by default one sequence at it, more than the 1 GiB default
    assert asked(None, "cpu", max_model_len=longest).cache_sizes().num_kv_blocks == longest // 16 > 2**30 // \
        on_cpu.block_bytes


@pytest.mark.parametrize("host_gib", [64, 24])
def test_the_default_host_kv_tier_fits_a_64_gb_host(monkeypatch, host_gib):
    """KV beyond VRAM on CUDA without --kv-host-mib: Qwen3-Next at its 262K context keeps 4K tokens a slot on
    the device; every slot's rest would take ~51 GiB of pinned RAM, so the tier takes at most 16 GiB and a
    quarter of the available RAM (but one whole sequence on a small host), announced in the plan's table; a
    32K context gets every slot; --kv-host-mib is taken as given."""
    from strata.config import CacheConfig
    from strata.engine import memory_plan

    spec = "random:qwen3-next-80b-a3b"
    cfg = open_source(spec).model_config()
    meta = meta_model(model_class(cfg), cfg)
    monkeypatch.setattr(memory_plan, "host_available_bytes", lambda: host_gib * GiB)

    def plan(max_model_len, **cache):
        config = EngineConfig(model=spec, cache=CacheConfig(kv_resident_tokens=4096, **cache),
                              scheduler=SchedulerConfig(max_num_seqs=8, max_model_len=max_model_len))
        return MemoryPlan(config, cfg, SpecConfig(), max_model_len, "cuda", torch.bfloat16, meta.has_mtp,
                          meta.recurrent_state_shapes())

    long = plan(cfg.max_position_embeddings)
    per_seq = (cfg.max_position_embeddings - 4096) // 16
    assert 8 * per_seq * long.block_bytes > 48 * GiB                      # every slot: more than the host holds
    blocks = long._num_host_kv_blocks()
    if host_gib == 64:
        assert blocks == 16 * GiB // long.block_bytes and blocks > 2 * per_seq
    else:
        assert blocks == per_seq > host_gib * GiB // 4 // long.block_bytes  # one sequence, over the quarter
    long.numbers.update(allowed_bytes=22 * GiB, total_bytes=24 * GiB, in_use_after_weights_bytes=10 * GiB)
    assert (f"host KV tier ({blocks} blocks in pinned host RAM beyond the newest 4096 tokens a slot): "
            f"{blocks * long.block_bytes / GiB:.2f} GiB (default: at most 16 GiB and 25% of {host_gib:.1f} GiB "
            f"available, at least one sequence; every slot at max_model_len would take") in long.table(100)
    short = plan(32768)
    assert short._num_host_kv_blocks() == 8 * (32768 - 4096) // 16
    assert short.numbers["host_kv_sizing"] == "every slot at max_model_len"
    given = plan(cfg.max_position_embeddings, kv_host_mib=20000)
    assert given._num_host_kv_blocks() == 20000 * 2**20 // given.block_bytes
    assert given.numbers["host_kv_sizing"] == "--kv-host-mib 20000"


def test_a_pipeline_stage_plans_its_own_card_for_its_own_layers(monkeypatch):
    """--pipeline-parallel-size 2 on two 24 GB cards (issue 27): each stage's plan counts only its own layers'
    weights, KV and recurrent states, so each card holds more than half of the experts one card would, and
    the two cards together more than twice as many; the KV block of a stage holds its own attention layers
    (the MTP layer's KV is the last stage's)."""
    from strata.engine import memory_plan
    from strata.runner.pipeline import Stage, layer_ranges

    spec = "random:qwen3-next-80b-a3b?num_hidden_layers=24"
    config = EngineConfig(model=spec)
    cfg = open_source(spec).model_config()
    meta = meta_model(model_class(cfg), cfg)
    monkeypatch.setattr(memory_plan, "host_available_bytes", lambda: 512 * GiB)
    allowed = int(24 * GiB * config.runner.gpu_memory_utilization)

    def plan_for(stage):
        plan = MemoryPlan(config, cfg, config.speculative, 4096, "cuda", torch.bfloat16, meta.has_mtp,
                          meta.recurrent_state_shapes(), stage)
        monkeypatch.setattr(plan, "_budget", lambda: GpuBudget(24 * GiB, allowed, GiB // 2))
        plan.expert_slots(meta)
        return plan

    whole = plan_for(None)
    stages = [plan_for(Stage(rank, 2, *layers, cfg.num_hidden_layers))
              for rank, layers in enumerate(layer_ranges(cfg.num_hidden_layers, 2))]
    assert whole.numbers["total_experts"] == 25 * 512  # 24 layers + MTP
    # the MTP head (its experts) is the last stage's, which drafts with it
    assert [p.numbers["total_experts"] for p in stages] == [12 * 512, 13 * 512]
    # every weight on one stage, but the embedding on both: the first embeds the prompt, the MTP head its drafts
    owned = [range(*layers) for layers in layer_ranges(cfg.num_hidden_layers, 2)]
    embedding = cfg.vocab_size * cfg.hidden_size * 2
    assert sum(weight_sizes(meta, torch.bfloat16, o).total for o in owned) == \
        weight_sizes(meta, torch.bfloat16).total + embedding
    assert all(p.auto_expert_slots < p.numbers["total_experts"] for p in [whole, *stages])  # a partial cache each
    assert sum(p.auto_expert_slots for p in stages) > 2 * whole.auto_expert_slots
    assert [p.num_kv_layers for p in stages] == [3, 4] and whole.num_kv_layers == 7  # 6 attention layers + MTP
    assert sum(p.state_row_bytes for p in stages) == whole.state_row_bytes
