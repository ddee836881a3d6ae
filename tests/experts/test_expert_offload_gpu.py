"""On a CUDA device: the offloaded provider's fused-kernel slot path (16-bit) against all experts
resident, greedy identity through the LLM API in float32 with 10% of experts resident, PCIe staging
and hot-set swaps every step (side-stream copies published by apply_ready), and bf16 CUDA graphs split
at the offloaded layers against the eager path (recaptured when residency or placement changes)."""

from __future__ import annotations

import pytest
import torch

from gguf_writer import write_gguf
from strata import LLM, SamplingParams, dma
from strata.config import EngineConfig, ExpertConfig, RunnerConfig
from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.placement import AUTO_ZERO_COPY_SHARE_OF_MISSED
from strata.experts.provider import IN_PLACE_MAX_ROWS, OffloadedExperts
from strata.experts.slots import ExpertSlots
from strata.experts.stats import RoutingStats
from strata.kernels.sm_copy import copy_words
from strata.model.moe import run_experts
from tiny_models import moe_256_state

pytestmark = pytest.mark.gpu

PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
PROMPTS = [{"prompt_token_ids": [3 + i, 17, 40 + 7 * i, 9, 100 - i, 55 + i]} for i in range(5)]


@pytest.mark.parametrize("num_slots", [0, 6, 16])
def test_bf16_provider_matches_all_experts_resident(num_slots):
    gen = torch.Generator().manual_seed(0)
    num_experts, dim, inter, tokens, top_k = 16, 256, 128, 12, 4
    w13 = (torch.randn(1, num_experts, 2 * inter, dim, generator=gen) * dim ** -0.5).bfloat16()
    w2 = (torch.randn(1, num_experts, dim, inter, generator=gen) * inter ** -0.5).bfloat16()
    slots = ExpertSlots([w13[0].pin_memory()], [w2[0].pin_memory()], num_slots, 2, "cuda")
    slots.fill([(0, e) for e in range(num_slots)])
    stats = RoutingStats(1, num_experts, "cuda")
    provider = OffloadedExperts(0, slots, CpuExpertPool(4), stats, pcie_frac=0.5)
    hidden = torch.randn(tokens, dim, generator=gen).bfloat16().cuda()
    topk_ids = torch.stack([torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(tokens)]).cuda()
    topk_weights = torch.rand(tokens, top_k, generator=gen).bfloat16().cuda()
    expected = run_experts(hidden, (w13[0].cuda(), w2[0].cuda()), topk_ids, topk_weights)
    got = provider(hidden, topk_ids, topk_weights)
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=2e-2)
    if num_slots == num_experts:  # fully resident: the same kernel on remapped ids, no host sync
        assert torch.equal(got, expected)


def test_staging_copies_are_runtime_copies_of_the_host_bytes():
    """Slots copy experts with one cudaMemcpyAsync each (strata/dma.py: the runtime torch loaded, found): staged
    and loaded slots hold the host experts' bytes, packed uint8 rows of two layers of different sizes included."""
    gen = torch.Generator().manual_seed(3)
    w13 = [torch.randint(0, 256, (6, 4, n), dtype=torch.uint8, generator=gen).pin_memory() for n in (144, 72)]
    w2 = [torch.randint(0, 256, (6, 8, n), dtype=torch.uint8, generator=gen).pin_memory() for n in (210, 105)]
    slots = ExpertSlots(w13, w2, 2, 3, "cuda", qtypes=[(12, 14), (12, 14)])
    assert dma.runtime() is not None and slots._dma is not None
    slots.fill([(1, 4), (0, 2)])
    staged = slots.stage(1, [5, 0, 3])
    torch.cuda.synchronize()
    for layer, expert, slot in [(1, 4, slots.slot_of[(1, 4)]), (0, 2, slots.slot_of[(0, 2)]),
                                *((1, e, s) for e, s in zip([5, 0, 3], staged))]:
        got = slots.layer_weights(layer)
        assert torch.equal(got.w13[slot].cpu(), w13[layer][expert]) and torch.equal(got.w2[slot].cpu(), w2[layer][expert])


def make_llm(folder: str, dtype: str, cuda_graphs: bool = False, **experts) -> LLM:
    runner = RunnerConfig(device="cuda", dtype=dtype, cuda_graphs=cuda_graphs)
    return LLM.from_config(EngineConfig(model=folder, runner=runner, experts=ExpertConfig(**experts)))


def test_float32_greedy_identical_with_10_percent_resident_and_swaps(tiny_model_dir):
    folder = tiny_model_dir("qwen3_moe")
    reference = [o.outputs[0].token_ids for o in make_llm(folder, "float32").generate(PROMPTS, PARAMS)]
    llm = make_llm(folder, "float32", expert_cache="10%", pcie_frac=0.5, expert_swap_interval=1,
                   expert_swap_threshold=0.0)
    runner, manager = llm.engine.runner, llm.engine.experts
    execute = runner.execute
    runner.execute = lambda plan: (execute(plan), manager.end_step())[0]
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)] == reference
    snap = manager.snapshot()
    assert snap["swaps"] > 0 and snap["cpu_share"] > 0 and snap["pcie_share"] > 0 and snap["gpu_hit_rate"] > 0


def test_float32_long_prompts_stream_their_experts_over_pcie(tiny_model_dir):
    """Prompt chunks copy every missed expert with at least prompt_stream_min_pairs pairs to the staging
    slots and run it on the device (on CUDA only): greedy output equals every expert resident."""
    folder = tiny_model_dir("qwen3_moe")
    prompts = [{"prompt_token_ids": [(7 * i + 13 * j) % 150 + 5 for j in range(96)]} for i in range(3)]
    reference = [o.outputs[0].token_ids for o in make_llm(folder, "float32").generate(prompts, PARAMS)]
    llm = make_llm(folder, "float32", expert_cache="10%", expert_swap_interval=0, prompt_stream_min_pairs=4)
    manager = llm.engine.experts
    assert manager.slots.num_staging > 0 and manager.pcie_frac == 0
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, PARAMS)] == reference
    snap = manager.snapshot()
    assert snap["pcie_share"] > 0 and snap["cpu_share"] > 0  # prompts streamed, decode rows on the CPU


def _loads_published_at_once(llm: LLM) -> LLM:
    """Swapped-in experts copied on the compute stream, so each is published at the end of the step
    that loaded it. With the side stream, publication waits for a copy to finish, which depends on
    timing; in bf16 the CPU and device compute an expert with different rounding, so the two runs
    would only agree while residency evolves alike."""
    llm.engine.experts.slots.side_stream = None
    return llm


def _tokens(llm: LLM, prompts=PROMPTS) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, PARAMS)]


@pytest.mark.parametrize("experts", [
    {"expert_cache": "30%", "expert_split": "uniform", "expert_swap_interval": 0},
    {"expert_cache": "50%", "expert_split": "static", "expert_swap_interval": 0},
    {"expert_cache": "50%", "expert_split": "static", "expert_swap_interval": 1, "expert_swap_threshold": 0.0},
    # staging queued by the host parts
    {"expert_cache": "30%", "expert_split": "uniform", "expert_swap_interval": 0, "pcie_frac": "0.5"},
    {"expert_cache": "50%", "expert_split": "static", "expert_swap_interval": 0, "pcie_frac": "0.5"},
])
def test_bf16_split_graphs_match_the_eager_path(tiny_model_dir, experts):
    folder = tiny_model_dir("qwen3_moe")
    reference = _tokens(_loads_published_at_once(make_llm(folder, "bfloat16", **experts)))
    llm = _loads_published_at_once(make_llm(folder, "bfloat16", cuda_graphs=True, **experts))
    runner, manager = llm.engine.runner, llm.engine.experts
    assert runner.graphs is not None and manager.offloaded
    assert _tokens(llm) == reference
    stats = runner.graph_stats()
    assert stats["replays"] > 0
    assert any(c.graph.num_splits > 0 for c in runner.graphs.graphs.values())
    assert manager.snapshot()["cpu_share"] > 0
    if experts.get("pcie_frac"):
        assert manager.pcie_frac == 0.5 and manager.snapshot()["pcie_share"] > 0
    if experts["expert_swap_interval"] == 0 and experts.get("expert_split") == "static":
        # whole layers on the CPU: their graphs skip the device part
        assert manager.graph_plan()[2]
    captures = stats["captures"]
    manager.replace(ExpertConfig(expert_cache="20%", expert_swap_interval=0), "cuda")  # a new placement epoch
    eager = make_llm(folder, "bfloat16", expert_cache="20%", expert_swap_interval=0)
    assert _tokens(llm) == _tokens(eager)
    assert runner.graph_stats()["captures"] > captures  # graphs of the old placement were not replayed


@pytest.mark.parametrize("experts", [
    {"expert_cache": "30%", "expert_split": "uniform", "expert_swap_interval": 0},
    {"expert_cache": "25%", "expert_split": "static", "expert_swap_interval": 1, "expert_swap_threshold": 0.0},
])
def test_split_graphs_launched_ahead_of_their_host_parts_match_the_eager_path(tiny_model_dir, experts, monkeypatch):
    """STRATA_LAUNCH_AHEAD=1: the graph after an offloaded layer's host part is launched before it and waits on a
    flag the host part raises (split_graphs' gated splits): the eager path's tokens, with swaps re-placing experts."""
    monkeypatch.setenv("STRATA_LAUNCH_AHEAD", "1")
    folder = tiny_model_dir("qwen3_moe")
    reference = _tokens(_loads_published_at_once(make_llm(folder, "bfloat16", **experts)))
    llm = _loads_published_at_once(make_llm(folder, "bfloat16", cuda_graphs=True, **experts))
    assert _tokens(llm) == reference and llm.engine.runner.graph_stats()["replays"] > 0
    assert any(flag is not None for c in llm.engine.runner.graphs.graphs.values() for flag in c.graph.flags)


@pytest.mark.parametrize("family", ["qwen4_exp", "qwen3_5_moe"])
def test_bf16_split_graphs_of_the_seed_families_match_the_eager_path(tiny_model_dir, family):
    """The seed's model (hyper-connections, QSA, PLE between its MoE layers) and Qwen3.5-MoE with 30 % of their experts
    on the device and half of the missed ones staged over PCIe: split graphs give the eager path's tokens."""
    experts = {"expert_cache": "30%", "expert_swap_interval": 0, "pcie_frac": "0.5"}
    folder = tiny_model_dir(family)
    reference = _tokens(_loads_published_at_once(make_llm(folder, "bfloat16", **experts)))
    llm = _loads_published_at_once(make_llm(folder, "bfloat16", cuda_graphs=True, **experts))
    assert _tokens(llm) == reference
    assert llm.engine.runner.graph_stats()["replays"] > 0
    assert any(c.graph.num_splits > 0 for c in llm.engine.runner.graphs.graphs.values())
    snapshot = llm.engine.experts.snapshot()
    assert snapshot["cpu_share"] > 0 and snapshot["pcie_share"] > 0


@pytest.fixture(scope="module")
def q4k_moe_file(tmp_path_factory):
    """A tiny Qwen3-MoE GGUF whose experts are Q4_K rows of whole superblocks (kept packed)."""
    path = str(tmp_path_factory.mktemp("q4k_moe") / "moe.gguf")
    write_gguf(path, *moe_256_state(), quant="Q4_K")
    return path


@pytest.mark.parametrize("experts", [
    # no prompt streaming (its default copies an expert that 6+ of a prompt step's rows route to): no staging at all
    {"expert_cache": "25%", "expert_split": "uniform", "expert_swap_interval": 0, "zero_copy_frac": 0.4,
     "prompt_stream_min_pairs": 0},
    {"expert_cache": "0%", "expert_swap_interval": 0, "zero_copy_frac": 0.5, "pcie_frac": "0.5"},
])
def test_packed_experts_read_in_place_inside_split_graphs_match_the_eager_path(q4k_moe_file, experts):
    """zero_copy_frac: the pairs kernel reads some of each layer's Q4_K experts straight from pinned host memory over
    PCIe (no copy), in the captured part beside the CPU pool's work: split graphs give the eager path's tokens, and
    the PCIe pairs without staging (no pcie_frac, no prompt streaming) copied no bytes. Four prompts: their decode steps read in place (steps of up to
    IN_PLACE_MAX_ROWS rows), eagerly too."""
    prompts = PROMPTS[:IN_PLACE_MAX_ROWS]
    eager = _loads_published_at_once(make_llm(q4k_moe_file, "bfloat16", **experts))
    reference = _tokens(eager, prompts)
    assert eager.engine.experts.snapshot()["pcie_share"] > 0
    del eager
    llm = _loads_published_at_once(make_llm(q4k_moe_file, "bfloat16", cuda_graphs=True, **experts))
    assert _tokens(llm, prompts) == reference
    assert llm.engine.runner.graph_stats()["replays"] > 0
    manager = llm.engine.experts
    assert sum(manager.slots.zero_copy_per_layer) > 0
    snapshot = manager.snapshot()
    assert snapshot["pcie_share"] > 0 and snapshot["cpu_share"] > 0
    if not experts.get("pcie_frac") and experts.get("prompt_stream_min_pairs") == 0:
        assert snapshot["bytes_moved"] == 0


def test_packed_experts_staged_by_the_sms_give_the_tokens_read_in_place(q4k_moe_file, monkeypatch):
    """STRATA_SM_STAGE=1: the pairs read from host memory have their experts copied to device rows by the SMs
    (slots.stage_by_sm) and run from there, eagerly and inside split graphs: the tokens of reading them in place.
    Four prompts: steps of up to IN_PLACE_MAX_ROWS rows read in place (five decoding together would not, eagerly)."""
    experts = {"expert_cache": "25%", "expert_split": "uniform", "expert_swap_interval": 0, "zero_copy_frac": 0.4}
    prompts = PROMPTS[:IN_PLACE_MAX_ROWS]
    reference = _tokens(_loads_published_at_once(make_llm(q4k_moe_file, "bfloat16", **experts)), prompts)
    monkeypatch.setenv("STRATA_SM_STAGE", "1")
    for graphs in (False, True):
        llm = _loads_published_at_once(make_llm(q4k_moe_file, "bfloat16", cuda_graphs=graphs, **experts))
        assert _tokens(llm, prompts) == reference
        assert llm.engine.experts.slots._sm_rows is not None and llm.engine.experts.snapshot()["pcie_share"] > 0


def test_dense_experts_are_not_read_in_place_on_cuda(tiny_model_dir):
    with pytest.raises(ValueError, match="zero_copy_frac reads packed"):
        make_llm(tiny_model_dir("qwen3_moe"), "bfloat16", expert_cache="30%", zero_copy_frac=0.3)
    assert make_llm(tiny_model_dir("qwen3_moe"), "bfloat16", expert_cache="30%").engine.experts.zero_copy is None


def test_zero_copy_auto_reads_a_share_of_the_missed_packed_experts_in_place(q4k_moe_file):
    """zero_copy_frac auto (the default) on CUDA with packed experts: AUTO_ZERO_COPY_SHARE_OF_MISSED of each layer's
    experts without a slot are read in place."""
    manager = make_llm(q4k_moe_file, "bfloat16", expert_cache="25%", expert_split="uniform",
                       expert_swap_interval=0).engine.experts
    missed = (~manager.slots.resident_mask()).sum(1)                                               # [L]
    assert manager.zero_copy == (AUTO_ZERO_COPY_SHARE_OF_MISSED, True)
    assert manager.slots.zero_copy_per_layer == torch.round(AUTO_ZERO_COPY_SHARE_OF_MISSED * missed).long().tolist()


def test_zero_copy_measure_times_the_share_and_keeps_the_tokens(q4k_moe_file):
    """zero_copy_frac measure: the share of the missed experts read in place is timed at start (the CPU pool against
    the pairs kernel reading host memory) and used as auto's would be; the tokens equal those of a fixed share that
    reads the same experts in place (the measured share differs run to run, so both arms take this run's)."""
    llm = make_llm(q4k_moe_file, "bfloat16", expert_cache="25%", expert_split="uniform", expert_swap_interval=0,
                   zero_copy_frac="measure")
    manager = llm.engine.experts
    share, of_missed = manager.zero_copy
    assert 0.0 <= share <= 1.0 and of_missed
    missed = (~manager.slots.resident_mask()).sum(1)                                               # [L]
    assert manager.slots.zero_copy_per_layer == torch.round(share * missed).long().tolist()
    same = make_llm(q4k_moe_file, "bfloat16", expert_cache="25%", expert_split="uniform", expert_swap_interval=0,
                    zero_copy_frac=max(manager.slots.zero_copy_per_layer) / manager.num_experts)
    assert torch.equal(same.engine.experts.slots.zero_copy_ids.cpu(), manager.slots.zero_copy_ids.cpu())
    assert _tokens(llm) == _tokens(same)


@pytest.mark.parametrize("sm_exchange", [True, False])
def test_offloaded_layers_beside_the_kv_staging_ring_match_the_eager_path(tiny_model_dir, monkeypatch, sm_exchange):
    """KV beyond VRAM staged (--kv-staging-layers) with offloaded experts in split graphs: the MoE layers' host
    transfers made by kernels (HostExchange.by_sm, the default) or by copy engines (STRATA_COPY_EXCHANGE=1). Greedy
    tokens equal the eager path, which reads the tier itself."""
    monkeypatch.setenv("STRATA_COPY_EXCHANGE", "0" if sm_exchange else "1")
    experts = {"expert_cache": "50%", "expert_split": "static", "expert_swap_interval": 0}
    prompts = [{"prompt_token_ids": [(5 * i + 11 * j) % 150 + 5 for j in range(20 + 9 * i)]} for i in range(4)]
    runs = {}
    for graphs in (False, True):
        llm = LLM(tiny_model_dir("qwen3_moe"), dtype="bfloat16", device="cuda", max_num_seqs=4, block_size=4,
                  kv_resident_tokens=16, kv_staging_layers=1 if graphs else 0, cuda_graphs=graphs, **experts)
        runs[graphs] = [o.outputs[0].token_ids for o in llm.generate(prompts, PARAMS)]
        if graphs:
            runner = llm.engine.runner
            assert runner.graph_stats()["replays"] > 0 and runner.kv_staging.copied
            assert llm.engine.experts.exchange.by_sm == sm_exchange and llm.engine.experts.snapshot()["cpu_share"] > 0
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]


@pytest.mark.parametrize("shape, dtype", [((16, 8), torch.long), ((3, 2048), torch.bfloat16), ((5, 7), torch.float32)])
def test_exchange_copies_by_kernel_both_ways_inside_a_graph(shape, dtype):
    """copy_words between pinned host buffers and the device, captured in a CUDA graph and replayed on new
    values: the same bytes as the tensors' own copies."""
    device = torch.randn(shape, device="cuda").to(dtype)
    host_out = torch.zeros(shape, dtype=dtype, pin_memory=True)
    host_in = torch.randn(shape).to(dtype).pin_memory()
    device_in = torch.zeros(shape, dtype=dtype, device="cuda")
    graph = torch.cuda.CUDAGraph()
    copy_words(host_out, device)  # compile outside the capture
    with torch.cuda.graph(graph):
        copy_words(host_out, device)
        copy_words(device_in, host_in)
    device.copy_(torch.randn(shape).to(dtype))
    host_in.copy_(torch.randn(shape).to(dtype))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(host_out, device.cpu()) and torch.equal(device_in.cpu(), host_in)


def test_host_copy_is_pinned_for_asynchronous_copies():
    from strata.transfer import host_copy

    source = torch.randn(64, 1024, device="cuda").bfloat16()
    host = host_copy(source, pin=True)
    assert host.is_pinned() and torch.equal(host.cuda(), source)
    back = torch.empty_like(source)
    back.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(back, source)
