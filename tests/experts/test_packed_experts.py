"""Routed experts from a GGUF file stay packed (PackedLocalExperts; ExpertBlocks in device slots and host
pools): each kept type gives the logits of the same file loaded with dense experts, bit for bit in float32;
expert placement (0 / 30 / 100 % resident, PCIe staging) never changes greedy output; layers whose down
projections differ in type share byte-sized slots; a file whose gate and up differ in type loads its experts packed
in their exact common type where there is one, else dense with a notice; the torch reference skips the pairs
computed elsewhere."""

from __future__ import annotations

import dataclasses
import logging

import gguf
import numpy as np
import pytest
import torch

from gguf_writer import write_gguf
from strata import LLM, SamplingParams
from strata.config import EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig
from strata.engine import memory_plan
from strata.engine.memory_plan import MemoryPlan
from strata.experts import calibrate
from strata.experts.slots import ExpertSlots
from strata.kernels.fused_moe import fused_moe_ref
from strata.kernels.gguf_blocks import PACKED_TYPE_NAMES
from strata.kernels.packed_moe import dequantize_experts, packed_moe_ref
from strata.model.moe import LocalExperts, PackedLocalExperts, run_experts
from strata.model.packed import ExpertBlocks, PackedWeight
from strata.model.registry import model_class
from strata.cache.block_allocator import blocks_needed
from strata.runner.memory import GpuBudget, ModelDoesNotFit, kv_reserve_tokens, meta_model, weight_sizes
from strata.weights import gguf_source
from strata.weights.gguf_source import GGUFSource
from strata.weights.loader import build_model
from tiny_models import build_hf_model, hf_config, moe_256_state, prompt_logits

Q = gguf.GGMLQuantizationType
IDS = [5, 17, 99, 3, 42, 150, 8, 77, 61, 12]
PARAMS = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
PROMPTS = [{"prompt_token_ids": [3 + i, 17, 40 + 7 * i, 9, 100 - i, 55 + i]} for i in range(4)]


@pytest.fixture(scope="module")
def moe_256():
    """A tiny Qwen3-MoE whose expert rows are whole superblocks (256 values), for every packed type."""
    return moe_256_state()


def load(path: str, packed_experts: bool = True, dtype: str = "float32"):
    with pytest.MonkeyPatch.context() as patch:
        if not packed_experts:
            patch.setattr(gguf_source, "why_experts_dense", lambda entries: "the test asks for dense experts")
        return build_model(GGUFSource(path), "cpu", dtype, quiet=True)


def experts_of(model) -> list:
    return [layer.mlp.experts for layer in model.model.layers if hasattr(layer.mlp, "experts")]


def assert_packed_experts_match_dense(packed, dense, monkeypatch) -> None:
    """CPU float32: the packed experts' native path (cpu_quant.dequant_matmul: gguf's exact weights, float32 sums in
    the kernel's order; it must be the one taken) gives the dense experts' logits within float32 rounding. The
    reference path's bits (packed_moe_ref = the dense path on dequantized experts): the test below."""
    from strata.model import ops

    taken = []
    native = ops._packed_moe_cpu
    monkeypatch.setattr(ops, "_packed_moe_cpu", lambda *args: taken.append(native(*args)) or taken[-1])
    expected = prompt_logits(dense, IDS)
    assert torch.isfinite(expected).all()
    logits = prompt_logits(packed, IDS)
    assert taken and all(out is not None for out in taken)
    assert ((logits - expected).abs().max() / expected.abs().max()).item() < 1e-5


@pytest.mark.parametrize("quant", PACKED_TYPE_NAMES)
def test_each_type_loads_packed_and_matches_dense_experts(quant, moe_256, tmp_path, monkeypatch):
    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant=quant)
    packed, dense = load(path), load(path, packed_experts=False)
    for experts in experts_of(packed):
        assert isinstance(experts, PackedLocalExperts)
        assert (Q(experts.qtype13).name, Q(experts.qtype2).name) == (quant, quant)
        assert experts.w13.dtype == torch.uint8 and experts.w13.shape[:2] == (8, 512)
    assert all(isinstance(e, LocalExperts) for e in experts_of(dense))
    assert_packed_experts_match_dense(packed, dense, monkeypatch)


def test_packed_reference_is_the_dense_path_on_dequantized_experts():
    rng = torch.Generator().manual_seed(0)
    w13 = torch.randint(0, 256, (6, 64, 34 * 2), dtype=torch.uint8, generator=rng)  # Q8_0 rows of 64 values
    w13.view(6, 64, 2, 34)[..., :2] = torch.tensor([0, 20], dtype=torch.uint8)      # finite scales (fp16 bits)
    w2 = torch.randint(0, 256, (6, 64, 34), dtype=torch.uint8, generator=rng)        # rows of 32 values
    w2.view(6, 64, 1, 34)[..., :2] = torch.tensor([0, 20], dtype=torch.uint8)
    hidden = torch.randn(5, 64, generator=rng)
    ids = torch.tensor([[0, 3], [3, -1], [5, 5], [-1, -1], [1, 2]])
    weights = torch.rand(5, 2, generator=rng)
    out = packed_moe_ref(hidden, w13, Q.Q8_0, w2, Q.Q8_0, ids, weights)
    dense = fused_moe_ref(hidden, dequantize_experts(w13, Q.Q8_0, 64, torch.float32),
                          dequantize_experts(w2, Q.Q8_0, 32, torch.float32), ids, weights)
    assert torch.equal(out, dense)
    assert torch.all(out[3] == 0)  # both pairs computed elsewhere


def make_llm(path: str, **experts) -> LLM:
    """Exact CPU products (not --cpu-matmul auto's int8 for these K-quant files): each placement sums an expert's
    share of a layer in its own order, which int8 activations can turn into other roundings downstream."""
    return LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cpu", dtype="float32",
                                                                        cpu_matmul="exact"),
                                        scheduler=SchedulerConfig(max_num_seqs=4), experts=ExpertConfig(**experts)))


def greedy(llm: LLM) -> list[list[int]]:
    return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, PARAMS)]


@pytest.fixture(scope="module")
def mixed_file(moe_256, tmp_path_factory):
    """Q4_K experts whose layer 0 has Q6_K down projections (llama.cpp's Q4_K_M does this on some layers)."""
    path = str(tmp_path_factory.mktemp("mixed") / "moe.gguf")
    write_gguf(path, *moe_256, quant="Q4_K", types={r"blk\.0\.ffn_down_exps": "Q6_K"})
    llm = make_llm(path)
    assert all(isinstance(e, PackedLocalExperts) for e in experts_of(llm.engine.loaded.model))
    return path, greedy(llm)


def test_packed_experts_hear_each_steps_longest_query(mixed_file, monkeypatch):
    """The decoder layers hand their packed experts the step's longest query (ForwardContext.max_query_len), by which
    the CUDA kernels tell a prompt's step from decode rows' and verification windows' (packed_moe.q8_pairs_per_expert):
    each 6-token prompt's step, then 1-token decode steps."""
    seen = []
    forward = PackedLocalExperts.forward
    monkeypatch.setattr(PackedLocalExperts, "forward", lambda self, *a, longest_query=0, **k:
                        seen.append(longest_query) or forward(self, *a, longest_query=longest_query, **k))
    llm = make_llm(mixed_file[0])
    seen.clear()
    out = llm.generate([PROMPTS[0]], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    assert out[0].outputs[0].token_ids == mixed_file[1][0][:3]
    layers = len(experts_of(llm.engine.loaded.model))
    assert seen == [6] * layers + [1] * layers * 2


@pytest.mark.parametrize("cache, pcie_frac, zero_copy", [("0%", 0.0, 0.0), ("30%", 0.0, 0.0), ("30%", 0.5, 0.0),
                                                      ("100%", 0.0, 0.0), ("30%", 0.0, 0.4)])
def test_expert_placement_never_changes_greedy_output(mixed_file, cache, pcie_frac, zero_copy):
    """zero_copy: experts read in place from their host blocks (ExpertSlots.set_zero_copy), counted as PCIe pairs."""
    path, reference = mixed_file
    llm = make_llm(path, expert_cache=cache, pcie_frac=pcie_frac, zero_copy_frac=zero_copy, expert_swap_interval=0)
    assert greedy(llm) == reference
    slots = llm.engine.experts.slots
    if cache == "100%":
        assert slots is None
        return
    assert [(Q(a).name, Q(b).name) for a, b in slots.qtypes] == [("Q4_K", "Q6_K"), ("Q4_K", "Q4_K")]
    assert slots.expert_bytes(0) > slots.expert_bytes(1)  # the Q6_K layer's experts fill their slots
    snap = llm.engine.status()["experts"]
    assert (snap["gpu_hit_rate"] > 0) == (cache != "0%") and snap["cpu_share"] > 0
    assert (snap["pcie_share"] > 0) == (pcie_frac > 0 or zero_copy > 0)


def test_in_place_share_is_timed_on_the_pool_and_the_pairs_kernel(mixed_file, monkeypatch):
    """`--zero-copy-frac measure`: nothing is read in place on a CPU device; the measurement itself (run here with the
    CPU as the "device") times the pool on one pair and on the missed pairs of a decode row, each repeat on other
    experts, and the in-place reads of the same count, and gives a share in [0, 1]."""
    path, _ = mixed_file
    manager = make_llm(path, expert_cache="30%", zero_copy_frac="measure", expert_swap_interval=0).engine.experts
    assert manager.zero_copy is None and sum(manager.slots.zero_copy_per_layer) == 0
    calls = []  # (pool or device, the layer's w13 address, experts)
    compute = manager.pool.compute
    monkeypatch.setattr(manager.pool, "compute", lambda h, r, e, w, b: calls.append(("pool", b.w13.data_ptr(),
                                                                                      e.tolist())) or
                        compute(h, r, e, w, b))
    monkeypatch.setattr(calibrate, "run_experts", lambda h, b, ids, w: calls.append(("device", b.w13.data_ptr(),
                                                                                    ids[0].tolist())) or
                        run_experts(h, b, ids, w))
    experts = [manager.slots.host_weights(layer) for layer in range(manager.num_layers)]
    share = calibrate.measure_in_place_share(experts, manager.pool, "cpu", missed_pairs=2.2, repeats=2)
    assert 0.0 <= share <= 1.0
    # set-up calls, then per repeat: the pool on 1 pair and on round(2.2) = 2, the device on 2, another layer each
    assert [(side, len(ids)) for side, _, ids in calls] == [("pool", 1), ("device", 2)] + [
        ("pool", 1), ("pool", 2), ("device", 2)] * 2
    for layer in range(2):
        timed = [(side, ptr, ids) for side, ptr, ids in calls[2:][3 * layer:3 * layer + 3]]
        assert {ptr for _, ptr, _ in timed} == {experts[layer].w13.data_ptr()}
        used = [e for _, _, ids in timed for e in ids]
        assert len(set(used)) == len(used)  # other experts every time: cold, as at decode


def test_measuring_the_in_place_share_stages_by_the_sms_under_the_switch(mixed_file, monkeypatch):
    """STRATA_SM_STAGE=1: the device's side of the measure runs what the step runs, the experts copied to device rows
    first (rows per layer shape: the file mixes block types) and the pairs run from there."""
    path, _ = mixed_file
    manager = make_llm(path, expert_cache="30%", expert_swap_interval=0).engine.experts
    experts = [manager.slots.host_weights(layer) for layer in range(manager.num_layers)]
    monkeypatch.setenv("STRATA_SM_STAGE", "1")
    seen = []

    def device_run(h, b, ids, w):  # (ids into the staged rows; is it a host tensor; is row 0 some host expert)
        seen.append((ids[0].tolist(), any(b.w13.data_ptr() == e.w13.data_ptr() for e in experts),
                     any(torch.equal(b.w13[0], e.w13[x]) for e in experts for x in range(e.w13.shape[0]))))
        return run_experts(h, b, ids, w)

    monkeypatch.setattr(calibrate, "run_experts", device_run)
    share = calibrate.measure_in_place_share(experts, manager.pool, "cpu", missed_pairs=2.2, repeats=2)
    assert 0.0 <= share <= 1.0 and len(seen) == 3
    assert all(ids == [0, 1] and not reads_host and staged for ids, reads_host, staged in seen)


def test_swaps_between_layers_of_different_types_keep_output(mixed_file):
    path, reference = mixed_file
    llm = make_llm(path, expert_cache="30%", expert_swap_interval=1, expert_swap_threshold=0.0)
    assert greedy(llm) == reference
    assert llm.engine.status()["experts"]["swaps"] > 0


def test_slots_hold_each_layers_blocks_in_their_own_view():
    rng = torch.Generator().manual_seed(1)
    host13 = [torch.randint(0, 256, (4, 8, 144), dtype=torch.uint8, generator=rng) for _ in range(2)]
    host2 = [torch.randint(0, 256, (4, 256, 210 if layer == 0 else 144), dtype=torch.uint8, generator=rng)
             for layer in range(2)]
    slots = ExpertSlots(host13, host2, 3, 0, "cpu", [(Q.Q4_K, Q.Q6_K), (Q.Q4_K, Q.Q4_K)])
    slots.fill([(0, 2), (1, 1), (1, 3)])
    for layer, expert in [(0, 2), (1, 1), (1, 3)]:
        blocks = slots.layer_weights(layer)
        assert isinstance(blocks, ExpertBlocks) and blocks.qtype2 == (Q.Q6_K if layer == 0 else Q.Q4_K)
        slot = int(slots.remap[layer, expert])
        assert torch.equal(blocks.w13[slot], host13[layer][expert])
        assert torch.equal(blocks.w2[slot], host2[layer][expert])
    assert slots.expert_bytes(0) == 8 * 144 + 256 * 210


@pytest.mark.parametrize("gate, up, loaded", [("Q4_K", "Q5_K", "Q5_K"), ("Q4_0", "IQ4_NL", "Q8_0")])
def test_gate_and_up_of_types_with_an_exact_common_one_load_packed_in_it(gate, up, loaded, moe_256, tmp_path,
                                                                        monkeypatch):
    """A layer's gate and up experts in different types that promote exactly to one (block_promotion) load packed
    in it: the logits of the dense load, and the memory plan's sizes are the promoted bytes."""
    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant="Q6_K", types={r"ffn_gate_exps": gate, r"ffn_up_exps": up})
    source = GGUFSource(path)
    assert source.experts_packed
    packed, dense = build_model(source, "cpu", "float32", quiet=True), load(path, packed_experts=False)
    for experts in experts_of(packed):
        assert (Q(experts.qtype13).name, Q(experts.qtype2).name) == (loaded, "Q6_K")
    assert_packed_experts_match_dense(packed, dense, monkeypatch)
    sizes = source.weight_sizes(torch.float32)
    assert sizes.experts == sum(e.w13.numel() + e.w2.numel() for e in experts_of(packed))


def test_gate_and_up_of_different_types_load_dense_with_a_notice(moe_256, tmp_path, caplog):
    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant="Q4_K", types={r"ffn_up_exps": "Q8_0"})
    source = GGUFSource(path)
    assert not source.experts_packed
    with caplog.at_level(logging.WARNING):
        model = build_model(source, "cpu", "float32", quiet=True)
    assert all(isinstance(e, LocalExperts) for e in experts_of(model))
    assert "routed experts loaded dequantized" in caplog.text and "Q4_K and Q8_0" in caplog.text


def test_cpu_matmul_int8_runs_the_experts_through_quant_moe(moe_256, tmp_path, monkeypatch):
    """--cpu-matmul int8 reaches the packed experts: each MoE layer's pairs go to cpu_quant.quant_moe in one call
    (activations rounded per block, with the dense layers: logits 1.5 % off the exact path's RMS, measured), and back
    to exact they do not."""
    from strata.kernels import cpu_quant
    from strata.model.packed import set_cpu_matmul

    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant="Q4_K")
    model = load(path)
    exact = prompt_logits(model, IDS)
    calls = []
    quant_moe = cpu_quant.quant_moe
    monkeypatch.setattr(cpu_quant, "quant_moe",
                        lambda *args, **kw: calls.append(args[3].size) or quant_moe(*args, **kw))
    set_cpu_matmul(model, "int8")
    rounded = prompt_logits(model, IDS)
    assert len(calls) == 2 and calls[0] == len(IDS) * 2  # one call a layer, every (token, expert) pair
    err = ((rounded - exact).pow(2).mean() / exact.pow(2).mean()).sqrt().item()
    assert 0 < err < 0.05
    set_cpu_matmul(model, "exact")
    assert torch.equal(prompt_logits(model, IDS), exact) and len(calls) == 2


@pytest.mark.parametrize("quant, mode", [("Q4_K", "int8"), ("Q6_K", "int8"), ("Q8_0", "exact"), ("Q4_1", "exact")])
def test_cpu_matmul_auto_picks_int8_where_superblock_types_dominate(moe_256, tmp_path, quant, mode):
    """--cpu-matmul auto, the default: int8 where most packed bytes are 256-value superblock types (K-quants,
    i-quants: their exact float decode takes the CPU several times int8's time), exact for the 32-value block types
    (about as fast exact); every packed weight and expert layer takes the mode picked."""
    from strata.model.packed import set_cpu_matmul

    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant=quant)
    model = load(path)
    assert set_cpu_matmul(model, "auto") == mode
    assert set_cpu_matmul(model, "auto", GGUFSource(path).bytes_by_type()) == mode  # the file's bytes (the engine's)
    assert {m.int8_activations for m in model.modules() if hasattr(m, "int8_activations")} == {mode == "int8"}
    assert set_cpu_matmul(model, "exact") == "exact"  # an explicit mode stays what it says
    assert not any(m.int8_activations for m in model.modules() if hasattr(m, "int8_activations"))


def test_engine_default_runs_a_k_quant_file_on_int8_activations(moe_256, tmp_path, monkeypatch):
    """The engine's default (--cpu-matmul auto) gives a Q4_K file's experts to quant_moe, and `exact` keeps them
    off it; both engines give tokens."""
    from strata.kernels import cpu_quant

    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant="Q4_K")
    calls = []
    quant_moe = cpu_quant.quant_moe
    monkeypatch.setattr(cpu_quant, "quant_moe", lambda *args, **kw: calls.append(1) or quant_moe(*args, **kw))
    for mode, expect_calls in ((None, True), ("exact", False)):
        options = {} if mode is None else {"cpu_matmul": mode}
        with LLM(path, dtype="float32", device="cpu", max_num_seqs=2, **options) as llm:
            calls.clear()
            out = llm.generate(PROMPTS[:1], PARAMS)[0].outputs[0].token_ids
        assert len(out) == PARAMS.max_tokens and bool(calls) == expect_calls, (mode, len(calls))


def test_router_rows_do_not_depend_on_the_step(moe_256, tmp_path):
    """The MoE router multiplies each CPU row alone (ops.row_wise_linear; torch's GEMM blocks its sums by the row
    count): a row's logits are the same bits alone and in a batch of 12, and so are a router's top-k ids and weights
    (MoEBlock.route on a 2,048-wide router: with torch's GEMM they differed at that width here). With int8
    activations (--cpu-matmul auto's pick for this K-quant file), suffix speculation's verification windows then
    give plain decoding's greedy tokens (on a 4-layer 30B-A3B Q4_K_M file a window's router rows moved a near-tie
    at a 0.055-nat margin before; bench/results/2026-12-06-session60/README.md)."""
    from strata.model import ops

    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(12, 256, generator=gen), torch.randn(16, 256, generator=gen)
    batched = ops.row_wise_linear(x, w)
    assert all(torch.equal(batched[i:i + 1], ops.row_wise_linear(x[i:i + 1], w)) for i in range(12))
    torch.testing.assert_close(batched, x @ w.T, rtol=1e-5, atol=1e-5)

    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant="Q4_K")
    block = next(layer.mlp for layer in load(path).model.layers if hasattr(layer.mlp, "experts"))
    block.gate.weight.data = torch.randn(block.gate.weight.shape[0], 2048, generator=gen)  # a 30B-A3B-wide router
    hidden = torch.randn(12, 2048, generator=gen)
    batched = block.route(hidden)
    for i in range(12):
        alone = block.route(hidden[i:i + 1])
        assert all(torch.equal(b[i:i + 1], a) for b, a in zip(batched, alone)), i
    prompts = [{"prompt_token_ids": [20 + i, 7, 8, 9, 10] * 4} for i in range(3)]
    outs = []
    for spec in (None, {"method": "suffix", "num_speculative_tokens": 3}):
        options = {} if spec is None else {"speculative_config": spec}
        with LLM(path, dtype="float32", device="cpu", max_num_seqs=4, **options) as llm:
            outs.append([o.outputs[0].token_ids for o in llm.generate(prompts, PARAMS)])
    assert outs[0] == outs[1]


def test_hybrid_model_experts_load_packed(tmp_path, monkeypatch):
    model = build_hf_model("qwen3_next")
    cfg = {**hf_config("qwen3_next").to_dict(), "architectures": ["Qwen3NextForCausalLM"]}
    path = str(tmp_path / "next.gguf")
    write_gguf(path, cfg, dict(model.state_dict()), quant="Q8_0")
    packed, dense = load(path), load(path, packed_experts=False)
    assert all(isinstance(e, PackedLocalExperts) for e in experts_of(packed))
    assert_packed_experts_match_dense(packed, dense, monkeypatch)


def test_weight_sizes_are_the_bytes_the_model_loads(mixed_file):
    path, _ = mixed_file
    sizes = GGUFSource(path).weight_sizes(torch.float32)
    model = load(path)
    experts = experts_of(model)
    expert_bytes = sum(e.w13.numel() + e.w2.numel() for e in experts)
    packed = {id(m): m for m in model.modules() if isinstance(m, PackedWeight)}.values()
    dense = sum(p.numel() for p in model.parameters()) * 4
    assert (sizes.experts, sizes.num_experts) == (expert_bytes, 16)
    assert sizes.total == expert_bytes + sum(w.nbytes for w in packed) + dense
    assert sizes.slot_bytes == max(e.blocks().expert_bytes for e in experts) > min(e.blocks().expert_bytes
                                                                                   for e in experts)


def test_memory_plan_gives_packed_experts_their_real_size(mixed_file, monkeypatch):
    path, _ = mixed_file
    source = GGUFSource(path)
    cfg = source.model_config()
    config = EngineConfig(model=path, scheduler=SchedulerConfig(max_num_seqs=2, max_model_len=256),
                          experts=ExpertConfig(prompt_stream_min_pairs=0))  # no staging slots set aside
    meta = meta_model(model_class(cfg), cfg)
    plan = MemoryPlan(config, cfg, config.speculative, 256, "cuda", torch.bfloat16, False, {})
    packed, dense = source.weight_sizes(torch.bfloat16), weight_sizes(meta, torch.bfloat16)
    kv_reserve = blocks_needed(kv_reserve_tokens(256, 2), config.cache.block_size) * plan.block_bytes \
        + memory_plan.RUNTIME_GROWTH_BYTES
    available = dense.total - dense.experts + plan.set_aside + kv_reserve + 6 * dense.per_slot  # dense: 6 slots
    monkeypatch.setattr(plan, "_budget", lambda: GpuBudget(available, available, 0))
    monkeypatch.setattr(memory_plan, "host_available_bytes", lambda: 1 << 40)
    dense_slots = plan._auto_expert_slots(dense)
    packed_slots = plan._auto_expert_slots(packed)
    assert dense_slots == 6 and packed_slots >= 2.5 * dense_slots
    half = MemoryPlan(dataclasses.replace(config, experts=ExpertConfig(expert_cache="50%", prompt_stream_min_pairs=0)),
                      cfg, config.speculative,
                      256, "cuda", torch.bfloat16, False, {})
    monkeypatch.setattr(half, "_budget", lambda: GpuBudget(available, available, 0))
    assert half.expert_slots(meta, packed)[1] == "cpu"  # half the experts load to host RAM
    monkeypatch.setattr(memory_plan, "host_available_bytes", lambda: packed.experts - 1)
    with pytest.raises(ModelDoesNotFit, match="host RAM"):
        half.expert_slots(meta, packed)


def test_cpu_pool_on_packed_experts(monkeypatch):
    """float32 runs compute packed experts exactly (each used expert dequantized); 16-bit runs take the
    native quant_moe (int8 activations per block), within its error of the same sums."""
    from gguf_writer import random_blocks
    from strata.experts.cpu_pool import CpuExpertPool
    from strata.kernels import cpu_quant

    rng = np.random.default_rng(0)
    blocks = ExpertBlocks(torch.from_numpy(random_blocks((8, 512, 256), Q.Q4_K, rng, 1e-2)), Q.Q4_K,
                          torch.from_numpy(random_blocks((8, 256, 256), Q.Q6_K, rng, 1e-2)), Q.Q6_K)
    hidden = torch.randn(3, 256, generator=torch.Generator().manual_seed(0))
    rows, experts, weights = torch.tensor([0, 0, 1, 2, 2]), torch.tensor([1, 5, 1, 7, 0]), torch.rand(5)
    ids = torch.tensor([[1, 5], [1, -1], [7, 0]])
    route = torch.stack([weights[:2], torch.stack([weights[2], torch.tensor(0.0)]), weights[3:]])
    expected = packed_moe_ref(hidden, blocks.w13, Q.Q4_K, blocks.w2, Q.Q6_K, ids, route)
    pool = CpuExpertPool(2)
    assert torch.equal(pool.compute(hidden, rows, experts, weights, blocks), expected)
    if not cpu_quant.supports_moe(Q.Q4_K, Q.Q6_K):
        pytest.skip("no C compiler for the native kernel")
    calls, native = [], cpu_quant.quant_moe
    monkeypatch.setattr(cpu_quant, "quant_moe", lambda *a, **k: calls.append(k) or native(*a, **k))
    out = pool.compute(hidden.bfloat16(), rows, experts, weights, blocks)
    assert calls and calls[0]["num_threads"] == 2
    assert ((out - expected).abs().max() / expected.abs().max()) < 0.05
    # the split-graph path's pairs: np.nonzero of a [T, K] mask gives strided row and k arrays
    pair_rows, pair_ks = np.nonzero(ids.numpy() >= 0)
    assert not pair_rows.flags.c_contiguous
    again = torch.zeros(3, 256)
    pool.accumulate(hidden.bfloat16(), pair_rows, ids.numpy()[pair_rows, pair_ks], route.numpy()[pair_rows, pair_ks],
                    blocks, again)
    torch.testing.assert_close(again, out, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 5, 40])
def test_packed_moe_layer_on_cuda_matches_dense_experts(moe_256, tmp_path, tokens):
    """The MoE layer on CUDA in bf16 (fused routing, the packed kernels, partials summed by the caller)
    against the same file's experts loaded dense: the same routing, outputs within bf16 rounding."""
    path = str(tmp_path / "moe.gguf")
    write_gguf(path, *moe_256, quant="Q4_K", types={r"blk\.0\.ffn_down_exps": "Q6_K"})
    with pytest.MonkeyPatch.context() as patch:
        packed = build_model(GGUFSource(path), "cuda", "bfloat16", quiet=True)
        patch.setattr(gguf_source, "why_experts_dense", lambda entries: "the test asks for dense experts")
        dense = build_model(GGUFSource(path), "cuda", "bfloat16", quiet=True)
    x = torch.randn(tokens, 256, generator=torch.Generator().manual_seed(tokens)).bfloat16().cuda()
    for layer in range(2):
        assert isinstance(packed.model.layers[layer].mlp.experts, PackedLocalExperts)
        out, expected = packed.model.layers[layer].mlp(x), dense.model.layers[layer].mlp(x)
        assert ((out.float() - expected.float()).abs().max() / expected.float().abs().max()) < 2e-2


@pytest.mark.parametrize("down_type, inter, expected", [("Q8_0", 640, True), ("Q5_0", 640, True), ("Q6_K", 512, True),
                                                        ("Q2_K", 512, True), ("Q3_K", 512, True), ("Q8_1", 512, False)])
def test_graphs_only_when_the_kernels_read_every_packed_expert_layer(down_type, inter, expected):
    """A packed expert layer the MoE kernels cannot read in place would dequantize all its experts inside
    every captured graph (Qwen4-Exp at Q4_K_M ran out of memory at 117 GiB of graph pools before its 640-wide
    Q8_0 down rows were read), so graphs stay off then (Q8_1 here: a GGUF type no kernel reads); Qwen4-Exp's
    Q8_0 / Q5_0 down rows and Q2_K / Q3_K files' rows are read."""
    from types import SimpleNamespace

    from strata.model.packed import PackedExpertWeight
    from strata.runner.model_runner import packed_experts_read_in_place

    q4k, q2 = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType[down_type]
    hidden = 512
    per_block, block_bytes = gguf.GGML_QUANT_SIZES[q2]
    w13 = PackedExpertWeight(torch.zeros(2, 2 * inter, hidden // 256 * 144, dtype=torch.uint8), q4k, hidden)
    w2 = PackedExpertWeight(torch.zeros(2, hidden, inter // per_block * block_bytes, dtype=torch.uint8), q2, inter)
    model = torch.nn.Module()
    model.experts = PackedLocalExperts(w13, w2)
    model.config = SimpleNamespace(hidden_size=hidden, moe_intermediate_size=inter)
    assert packed_experts_read_in_place(model) is expected
