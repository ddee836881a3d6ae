"""Experts split between device slots, PCIe staging and the CPU pool: greedy output through the LLM
API is identical whatever share of experts is resident, with the hot set swapped mid-generation, and
with a hot set read from a profile recorded by `strata profile`. On this CPU-only machine the "device"
is the CPU too, but resident and missed experts still take their two code paths (slot weights through
the grouped path; host weights through the worker pool), which the shares in the stats prove."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata import LLM, SamplingParams
from strata.cli.main import main
from strata.config import EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig
from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.profile import load_profile
from strata.experts.provider import OffloadedExperts
from strata.experts.slots import ExpertSlots
from strata.experts.stats import RoutingStats
from strata.kernels.fused_moe import fused_moe_ref
from strata.model.moe import run_experts

PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
PROMPTS = [{"prompt_token_ids": [3 + i, 17, 40 + 7 * i, 9, 100 - i, 55 + i]} for i in range(5)]


def make_llm(folder: str, max_num_seqs: int = 8, **experts) -> LLM:
    return LLM.from_config(EngineConfig(model=folder, runner=RunnerConfig(device="cpu", dtype="float32"),
                                        scheduler=SchedulerConfig(max_num_seqs=max_num_seqs),
                                        experts=ExpertConfig(**experts)))


def greedy(llm: LLM, prompts=PROMPTS) -> list[list[int]]:
    return [out.outputs[0].token_ids for out in llm.generate(prompts, PARAMS)]


# the seed's model (Qwen4-Exp: hyper-connections, QSA, its gated shared expert) and Qwen3.5-MoE offload as well
@pytest.fixture(scope="module", params=["qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen4_exp"])
def family_reference(request, tiny_model_dir):
    folder = tiny_model_dir(request.param)
    llm = make_llm(folder)
    assert llm.engine.experts.slots is None  # the default keeps every expert on the device
    return folder, greedy(llm)


@pytest.mark.parametrize("cache, pcie_frac", [("0%", 0.0), ("30%", 0.0), ("70%", 0.0), ("100%", 0.0),
                                              ("30%", 0.5), ("0", 1.0)])
def test_greedy_output_identical_whatever_share_is_resident(family_reference, cache, pcie_frac):
    folder, reference = family_reference
    llm = make_llm(folder, expert_cache=cache, pcie_frac=pcie_frac, expert_swap_interval=0)
    assert llm.engine.experts.zero_copy is None  # zero_copy_frac auto: no in-place reads when the device is the CPU
    assert greedy(llm) == reference
    snap = llm.engine.status()["experts"]
    if cache == "100%":
        assert llm.engine.experts.slots is None and "gpu_hit_rate" not in snap
        return
    assert snap["gpu_hit_rate"] + snap["cpu_share"] + snap["pcie_share"] == pytest.approx(1.0)
    assert (snap["gpu_hit_rate"] > 0) == (cache not in ("0%", "0"))
    assert (snap["pcie_share"] > 0) == (pcie_frac > 0)
    assert (snap["cpu_share"] > 0) == (pcie_frac < 1.0)
    assert (snap["bytes_moved"] > 0) == (pcie_frac > 0)


@pytest.mark.parametrize("cache, pcie_frac", [("30%", 0.0), ("0%", 0.5)])
def test_experts_read_in_place_keep_greedy_output(family_reference, cache, pcie_frac):
    """zero_copy_frac: 40 % of each layer's experts computed from their host copy in place by the "device" (here the
    CPU again, through the slot path's kernels) in steps of up to 4 rows, the other missed ones by the CPU pool or
    staged: greedy output is unchanged and pairs took every path (PCIe pairs without staging are the in-place ones;
    prompt steps of 6 rows send the zero-copy experts' pairs to the CPU)."""
    folder, _ = family_reference
    reference = greedy(make_llm(folder, max_num_seqs=2))
    llm = make_llm(folder, max_num_seqs=2, expert_cache=cache, pcie_frac=pcie_frac, zero_copy_frac=0.4,
                   expert_split="uniform", expert_swap_interval=0)
    manager = llm.engine.experts
    in_place = manager.slots.zero_copy_ids.cpu() >= 0                                  # [L, E]
    assert in_place.sum(1).tolist() == [round(0.4 * manager.num_experts)] * manager.num_layers
    assert not (in_place & manager.slots.resident_mask()).any()
    assert greedy(llm) == reference
    snap = manager.snapshot()
    assert snap["pcie_share"] > 0 and snap["cpu_share"] > 0 and (snap["gpu_hit_rate"] > 0) == (cache != "0%")
    assert (snap["bytes_moved"] > 0) == (pcie_frac > 0)  # reading in place copies nothing


def test_experts_read_in_place_follow_the_hot_set_and_the_routing_so_far(tiny_model_dir):
    """With swaps, the in-place set is chosen again at every hot-set update: the most routed so far among the
    experts that have no slot after the swaps. Greedy output is unchanged with both moving every step."""
    folder = tiny_model_dir("qwen3_moe")
    reference = greedy(make_llm(folder, max_num_seqs=2))
    llm = make_llm(folder, max_num_seqs=2, expert_cache="30%", zero_copy_frac=0.4, expert_swap_interval=1,
                   expert_swap_threshold=0.0)
    assert greedy(llm) == reference
    manager = llm.engine.experts
    assert manager.snapshot()["swaps"] > 0 and manager.snapshot()["pcie_share"] > 0
    num_layers, num_experts = manager.num_layers, manager.num_experts
    # [L, E] distinct, far above the generation's counts, which they are added to
    counts = (torch.randperm(num_layers * num_experts).view(num_layers, num_experts) + 1) * 10 ** 6
    manager.stats.window_counts.copy_(counts)
    manager.update_hot_set()
    resident, in_place = manager.slots.resident_mask(), manager.slots.zero_copy_ids.cpu() >= 0   # [L, E] each
    for layer in range(num_layers):
        outside = [e for e in range(num_experts) if not resident[layer, e]]
        hottest = sorted(outside, key=lambda e: -int(counts[layer, e]))[:round(0.4 * num_experts)]
        assert sorted(torch.nonzero(in_place[layer]).flatten().tolist()) == sorted(hottest)
    assert manager.slots.zero_copy_per_layer == in_place.sum(1).tolist()


def test_hot_set_swaps_mid_generation_keep_output_identical(family_reference):
    folder, reference = family_reference
    llm = make_llm(folder, expert_cache="30%", expert_swap_interval=1, expert_swap_threshold=0.0)
    before = llm.engine.experts.slots.resident_mask()
    assert greedy(llm) == reference
    snap = llm.engine.status()["experts"]
    assert snap["swaps"] > 0 and snap["bytes_moved"] > 0
    assert not torch.equal(llm.engine.experts.slots.resident_mask(), before)
    assert int(llm.engine.experts.slots.resident_mask().sum()) == llm.engine.experts.num_slots


def test_single_stream_decode_with_swaps_every_step(tiny_model_dir):
    folder = tiny_model_dir("qwen3_moe")
    reference = greedy(make_llm(folder), PROMPTS[:1])
    llm = make_llm(folder, max_num_seqs=1, expert_cache="5", expert_swap_interval=1, expert_swap_threshold=0.0,
                   pcie_frac=0.5)
    assert greedy(llm, PROMPTS[:1]) == reference


def test_steps_and_counts_through_the_engine(tiny_model_dir):
    llm = make_llm(tiny_model_dir("qwen3_moe"), expert_cache="50%")
    outputs = llm.generate(PROMPTS[:2], SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    manager = llm.engine.experts
    snap = manager.snapshot(with_counts=True)
    # every token forwarded (prompt + all outputs but the last) routes top_k = 2 pairs in each MoE layer
    forwarded = sum(len(o.prompt_token_ids) + len(o.outputs[0].token_ids) - 1 for o in outputs)
    assert [sum(layer) for layer in snap["counts"]] == [2 * forwarded] * manager.num_layers
    # one prompt step (both prompts in one chunk) and 5 decode steps
    assert snap["steps"] == 6
    assert 2 <= snap["mean_experts_touched_per_layer"] <= 4  # 2 tokens x top-2 per decode step


def test_update_hot_set_follows_the_window_counts_and_fills_slots_from_host(tiny_model_dir):
    llm = make_llm(tiny_model_dir("qwen3_moe"), expert_cache="16", expert_split="static", expert_swap_interval=0)
    manager = llm.engine.experts
    slots = manager.slots
    assert slots.resident_mask()[:2].all() and int(slots.resident_mask().sum()) == 16  # layers 0 and 1 whole
    manager.stats.window_counts.zero_()
    manager.stats.window_counts[2, 7] = 50
    manager.stats.window_counts[2, 3] = 40
    manager.stats.window_counts[2, 5] = 30   # a third candidate, beyond the 16 / 8 = 2 swaps of one update
    manager.stats.window_counts[0, 0] = 10
    assert manager.update_hot_set() == 2
    # the coldest residents (0 uses, lowest ids first) make room: (0, 1) and (0, 2)
    expected = [(0, 0)] + [(0, e) for e in range(3, 8)] + [(1, e) for e in range(8)] + [(2, 3), (2, 7)]
    assert [tuple(x) for x in slots.resident_mask().nonzero().tolist()] == expected
    for layer, expert in expected:
        slot = int(slots.remap[layer, expert])
        w13, w2 = slots.layer_weights(layer)
        assert torch.equal(w13[slot], slots.host_w13[layer][expert])
        assert torch.equal(w2[slot], slots.host_w2[layer][expert])
    assert int((slots.remap >= 0).sum()) == 16 and slots.remap[0, 1] == -1
    assert manager.stats.window_counts.sum() == 0  # a new window


def test_provider_matches_all_experts_on_random_routing():
    """The provider alone against the all-resident grouped path, with hits, PCIe and CPU pairs in one call."""
    gen = torch.Generator().manual_seed(0)
    num_experts, dim, inter, tokens, top_k = 6, 16, 8, 9, 3
    w13 = torch.randn(2, num_experts, 2 * inter, dim, generator=gen)
    w2 = torch.randn(2, num_experts, dim, inter, generator=gen)
    slots = ExpertSlots(list(w13), list(w2), num_slots=3, num_staging=1, device="cpu")
    slots.fill([(1, 0), (1, 2), (1, 5)])
    stats = RoutingStats(2, num_experts, "cpu")
    provider = OffloadedExperts(1, slots, CpuExpertPool(2), stats, pcie_frac=0.5)
    hidden = torch.randn(tokens, dim, generator=gen)
    topk_ids = torch.stack([torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(tokens)])
    topk_weights = torch.rand(tokens, top_k, generator=gen)
    expected = fused_moe_ref(hidden, w13[1], w2[1], topk_ids, topk_weights)
    torch.testing.assert_close(provider(hidden, topk_ids, topk_weights), expected, rtol=1e-5, atol=1e-5)
    gpu, cpu, pcie = stats.pair_counts()
    assert gpu == int(torch.isin(topk_ids, torch.tensor([0, 2, 5])).sum()) and cpu > 0 and pcie > 0
    assert gpu + cpu + pcie == tokens * top_k


def test_prompt_chunks_stream_their_experts_through_the_staging_slots_in_rounds():
    """prompt_stream_min_pairs: every missed expert with that many pairs in the call is copied and run on
    the device, in rounds of as many experts as there are staging slots (here 2 slots for 5 such
    experts: 3 rounds); those with fewer pairs go to the CPU. Output = the all-resident grouped path."""
    gen = torch.Generator().manual_seed(1)
    num_experts, dim, inter, tokens, top_k = 8, 16, 8, 40, 2
    w13 = torch.randn(1, num_experts, 2 * inter, dim, generator=gen)
    w2 = torch.randn(1, num_experts, dim, inter, generator=gen)
    slots = ExpertSlots(list(w13), list(w2), num_slots=1, num_staging=2, device="cpu")
    slots.fill([(0, 7)])
    stats = RoutingStats(1, num_experts, "cpu")
    provider = OffloadedExperts(0, slots, CpuExpertPool(2), stats, pcie_frac=0.0, prompt_stream_min_pairs=8)
    # experts 0-4 take 12 pairs each (streamed), 5 and 6 take 4 each (CPU), 7 is resident (12 pairs)
    firsts = torch.tensor([0] * 12 + [1] * 12 + [2] * 12 + [5] * 4)
    seconds = torch.tensor([3] * 12 + [4] * 12 + [7] * 12 + [6] * 4)
    topk_ids = torch.stack([firsts, seconds], dim=1)[torch.randperm(tokens, generator=gen)]   # [T, K]
    topk_weights = torch.rand(tokens, top_k, generator=gen)
    hidden = torch.randn(tokens, dim, generator=gen)
    copied = []
    stage = slots.stage
    slots.stage = lambda layer, experts: copied.append(list(experts)) or stage(layer, experts)
    expected = fused_moe_ref(hidden, w13[0], w2[0], topk_ids, topk_weights)
    torch.testing.assert_close(provider(hidden, topk_ids, topk_weights), expected, rtol=1e-5, atol=1e-5)
    assert [len(round_) for round_ in copied] == [2, 2, 1] and sorted(sum(copied, [])) == [0, 1, 2, 3, 4]
    gpu, cpu, pcie = stats.pair_counts()
    assert (gpu, cpu, pcie) == (12, 8, 60)
    # the same call with streaming off: only the resident expert on the device
    stats_off = RoutingStats(1, num_experts, "cpu")
    off = OffloadedExperts(0, slots, CpuExpertPool(2), stats_off, pcie_frac=0.0)
    torch.testing.assert_close(off(hidden, topk_ids, topk_weights), expected, rtol=1e-5, atol=1e-5)
    assert stats_off.pair_counts() == (12, 68, 0)


def test_an_eager_offloaded_layer_reads_to_the_host_before_it_queues_the_device_parts(monkeypatch):
    """Every copy to the host (routing, pair weights, hidden rows) is made before the device's parts (resident
    pairs, staged rounds) are queued, and the CPU pool starts after them: a copy to the host waits for all that is
    queued before it, so one made later would hold the CPU's pairs back until the device's were done."""
    from strata.experts import provider as provider_module

    gen = torch.Generator().manual_seed(2)
    num_experts, dim, inter, tokens, top_k = 8, 16, 8, 24, 2
    w13 = torch.randn(1, num_experts, 2 * inter, dim, generator=gen)
    w2 = torch.randn(1, num_experts, dim, inter, generator=gen)
    slots = ExpertSlots(list(w13), list(w2), num_slots=2, num_staging=2, device="cpu")
    slots.fill([(0, 0), (0, 1)])
    pool = CpuExpertPool(2)
    provider = OffloadedExperts(0, slots, pool, RoutingStats(1, num_experts, "cpu"), pcie_frac=0.0,
                                prompt_stream_min_pairs=4)
    topk_ids = torch.stack([torch.randperm(num_experts, generator=gen)[:top_k] for _ in range(tokens)])
    topk_weights, hidden = torch.rand(tokens, top_k, generator=gen), torch.randn(tokens, dim, generator=gen)
    events = []
    cpu, to, run_experts, accumulate = torch.Tensor.cpu, torch.Tensor.to, provider_module.run_experts, pool.accumulate

    inputs = {id(hidden), id(topk_ids), id(topk_weights)}

    def read(t) -> None:  # the layer's inputs and the routing masks it derives are what it reads to the host
        if id(t) in inputs or t.dtype == torch.bool:
            events.append("to host")

    def to_host(t, *args, **kwargs):
        if str(args[0] if args else kwargs.get("device")) == "cpu":
            read(t)
        return to(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "cpu", lambda t, *a, **k: read(t) or cpu(t, *a, **k))
    monkeypatch.setattr(torch.Tensor, "to", to_host)
    monkeypatch.setattr(provider_module, "run_experts", lambda *a: events.append("device") or run_experts(*a))
    monkeypatch.setattr(pool, "accumulate", lambda *a: events.append("cpu pool") or accumulate(*a))
    out = provider(hidden, topk_ids, topk_weights)
    monkeypatch.undo()
    torch.testing.assert_close(out, fused_moe_ref(hidden, w13[0], w2[0], topk_ids, topk_weights), rtol=1e-5,
                               atol=1e-5)
    assert events.count("device") >= 2 and "cpu pool" in events  # resident pairs, a staged round, the CPU's
    assert events.index("to host") < events.index("device")
    first_device = events.index("device")
    assert "to host" not in events[first_device:] and events.index("cpu pool") > first_device


def test_staging_plan_copies_the_most_used_missed_experts_first():
    """The staging plan: pcie_frac of the distinct missed experts, most pairs first and then the lower id, at most
    as many as there are staging slots; with prompt streaming every expert with enough pairs as well."""
    w13, w2 = torch.zeros(1, 8, 4, 2), torch.zeros(1, 8, 2, 2)
    slots = ExpertSlots(list(w13), list(w2), num_slots=1, num_staging=2, device="cpu")
    stats = RoutingStats(1, 8, "cpu")
    missed = np.array([6, 3, 6, 5, 3, 6, 1], dtype=np.int64)  # 6: 3 pairs, 3: 2, then 1 and 5 one each
    half = OffloadedExperts(0, slots, CpuExpertPool(1), stats, pcie_frac=0.5)
    chosen, staged = half._staging_plan(missed, num_rows=4)
    assert chosen.tolist() == [6, 3] and staged.tolist() == [0, 1, 0, -1, 1, 0, -1]  # 0.5 x 4 experts, 2 slots
    quarter = OffloadedExperts(0, slots, CpuExpertPool(1), stats, pcie_frac=0.25)
    assert quarter._staging_plan(missed, num_rows=4)[0].tolist() == [6]
    ties = np.array([5, 1, 3], dtype=np.int64)
    assert half._staging_plan(ties, num_rows=3)[0].tolist() == [1, 3]  # one pair each: the lower ids, 2 slots
    streams = OffloadedExperts(0, slots, CpuExpertPool(1), stats, pcie_frac=0.0, prompt_stream_min_pairs=2)
    assert streams._staging_plan(missed, num_rows=4)[0].tolist() == [6, 3]
    assert streams._staging_plan(missed, num_rows=1)[0].tolist() == []  # fewer rows than the streaming minimum
    none = OffloadedExperts(0, slots, CpuExpertPool(1), stats, pcie_frac=0.0)
    assert none._staging_plan(missed, num_rows=4)[1].tolist() == [-1] * 7


def test_profile_command_round_trip_fills_the_hot_set(tiny_model_dir, tmp_path):
    folder = tiny_model_dir("qwen3_moe")
    path = str(tmp_path / "profile.json")
    assert main(["profile", folder, "--output", path, "--device", "cpu", "--dtype", "float32",
                 "--max-tokens", "4"]) == 0
    counts = load_profile(path, 3, 8)
    assert len(set(counts.sum(dim=1).tolist())) == 1 and counts.sum() > 0  # every layer routed every token
    llm = make_llm(folder, expert_cache="6", expert_profile=path, expert_swap_interval=0)
    manager = llm.engine.experts
    top6 = set(divmod(i, 8) for i in torch.argsort(-counts.flatten(), stable=True)[:6].tolist())
    assert set(map(tuple, manager.slots.resident_mask().nonzero().tolist())) == top6
    greedy(llm, PROMPTS[:1])
    manager.close()  # saves the profile: the loaded counts plus what this run routed
    assert torch.equal(load_profile(path, 3, 8), counts + manager.stats.counts())


def test_profile_of_another_model_is_refused(tiny_model_dir, tmp_path):
    path = str(tmp_path / "moe.json")
    assert main(["profile", tiny_model_dir("qwen3_moe"), "--output", path, "--device", "cpu", "--max-tokens", "2"]) == 0
    with pytest.raises(ValueError, match="this model has 4 MoE layers of 8 experts"):
        make_llm(tiny_model_dir("qwen3_next"), expert_cache="50%", expert_profile=path)


def test_model_without_experts_has_no_manager(tiny_model_dir):
    llm = make_llm(tiny_model_dir("llama"), expert_cache="10%")
    assert llm.engine.experts is None and llm.engine.status()["experts"] is None


def test_expert_budget_caps_tokens_per_step_and_keeps_output(family_reference):
    """--expert-budget with offloaded experts: the scheduler caps tokens per step so the expected
    distinct experts per layer stay within the budget (prompts are read in smaller chunks)."""
    from strata.experts.placement import tokens_for_expert_budget

    folder, reference = family_reference
    llm = make_llm(folder, expert_cache="30%", expert_budget=6)
    cfg = llm.engine.model_config
    cap = tokens_for_expert_budget(cfg.num_experts, cfg.num_experts_per_tok, 6)
    assert llm.engine.scheduler.expert_token_budget == cap and cap < len(PROMPTS[0]["prompt_token_ids"])
    sizes = []
    execute = llm.engine.runner.execute
    llm.engine.runner.execute = lambda plan: (sizes.append((plan.num_tokens, len(plan.scheduled))), execute(plan))[1]
    assert greedy(llm) == reference
    assert all(tokens <= max(cap, slots) for tokens, slots in sizes)


def test_tokens_for_expert_budget():
    from strata.experts.placement import tokens_for_expert_budget

    assert tokens_for_expert_budget(128, 8, 64) == 10     # 128 * (1 - (15/16)^10) = 60.9 <= 64 < 65.1 at 11
    assert tokens_for_expert_budget(128, 8, 0) is None and tokens_for_expert_budget(128, 8, 128) is None
    assert tokens_for_expert_budget(128, 8, 4) == 1


def test_replace_moves_to_another_placement_and_keeps_output(family_reference):
    """One engine, experts re-placed between a 30% learned-style and a 70% static split (what the
    expert-cache sweep does): output stays the reference's and the statistics start over."""
    folder, reference = family_reference
    llm = make_llm(folder, expert_cache="30%", expert_swap_interval=2)
    assert greedy(llm) == reference
    manager = llm.engine.experts
    total = manager.num_layers * manager.num_experts
    manager.replace(ExpertConfig(expert_cache="70%", expert_split="static", expert_swap_interval=0), "cpu")
    assert manager.num_slots == round(0.7 * total) and manager.snapshot()["steps"] == 0
    assert greedy(llm) == reference
    snap = manager.snapshot()
    assert snap["swaps"] == 0 and 0 < snap["cpu_share"] < 1
    with pytest.raises(ValueError, match="expert_cache=all"):
        manager.replace(ExpertConfig(expert_cache="all"), "cpu")


def test_per_request_expert_shares_add_up_to_the_engine_shares(tiny_model_dir):
    llm = make_llm(tiny_model_dir("qwen3_moe"), expert_cache="30%", pcie_frac=0.5, expert_swap_interval=0)
    outputs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    manager = llm.engine.experts
    per_token = manager.top_k * manager.num_layers
    pairs = cpu = 0.0
    for out in outputs:
        m = out.metrics
        forwarded = len(out.prompt_token_ids) + len(out.outputs[0].token_ids) - 1
        assert m["expert_pairs"] == forwarded * per_token
        assert m["expert_gpu_hit_rate"] + m["expert_cpu_share"] + m["expert_pcie_share"] == pytest.approx(1.0)
        pairs += m["expert_pairs"]
        cpu += m["expert_cpu_share"] * m["expert_pairs"]
    snap = manager.snapshot()
    assert 0 < snap["cpu_share"] < 1 and snap["pcie_share"] > 0
    assert cpu / pairs == pytest.approx(snap["cpu_share"])


def test_all_resident_requests_report_no_expert_shares(tiny_model_dir):
    out = make_llm(tiny_model_dir("qwen3_moe")).generate(PROMPTS[:1], PARAMS)[0]
    assert "expert_pairs" not in out.metrics


def test_experts_staged_by_the_sms_compute_what_reading_them_in_place_does():
    """slots.stage_by_sm (STRATA_SM_STAGE=1): each pair read from host memory gets its expert copied into a row of
    its own (the largest layer's size: a smaller layer's rows lie apart) and the pairs run from there give what
    they give read in place; pairs not read in place are left out of both."""
    gen = torch.Generator().manual_seed(5)
    num_experts, dim, inter, tokens, top_k = 6, 16, 8, 2, 3
    w13 = torch.randn(2, num_experts, 2 * inter, dim, generator=gen)
    w2 = torch.randn(2, num_experts, dim, inter, generator=gen)
    slots = ExpertSlots(list(w13), list(w2), num_slots=2, num_staging=0, device="cpu")
    in_place = torch.tensor([[4, -1, 1], [1, 3, -1]])                 # [T, K]
    weights, rows = slots.stage_by_sm(1, in_place, max_pairs=8)
    assert rows.tolist() == [[0, -1, 2], [3, 4, -1]]
    for pair, expert in enumerate(in_place.reshape(-1).tolist()):
        if expert >= 0:
            assert torch.equal(weights[0][pair], w13[1][expert]) and torch.equal(weights[1][pair], w2[1][expert])
    hidden = torch.randn(tokens, dim, generator=gen)
    topk_weights = torch.rand(tokens, top_k, generator=gen)
    torch.testing.assert_close(run_experts(hidden, weights, rows, topk_weights),
                               run_experts(hidden, slots.host_weights(1), in_place, topk_weights), rtol=1e-5, atol=1e-5)
    # packed layers of two sizes: the smaller layer's experts land in rows sized for the larger
    blocks13 = [torch.randint(0, 256, (6, 4, n), dtype=torch.uint8, generator=gen) for n in (144, 72)]
    blocks2 = [torch.randint(0, 256, (6, 8, n), dtype=torch.uint8, generator=gen) for n in (210, 105)]
    packed = ExpertSlots(blocks13, blocks2, 2, 0, "cpu", qtypes=[(12, 14), (12, 14)])
    staged, rows = packed.stage_by_sm(1, torch.tensor([[5, -1, 0]]), max_pairs=3)
    assert staged.w13.stride(0) == 4 * 144 and torch.equal(staged.w13[0], blocks13[1][5])
    assert torch.equal(staged.w2[2], blocks2[1][0]) and rows.tolist() == [[0, -1, 2]]
