"""Hot-set policy (initial splits, swap planning), routing-profile files, and configuration errors."""

from __future__ import annotations

import json

import pytest
import torch

from strata.cli.main import main
from strata.config import ExpertConfig
from strata.experts.placement import initial_hot_set, plan_swaps, zero_copy_set
from strata.experts.profile import load_profile, save_profile


def test_static_split_fills_whole_layers_from_the_first():
    assert initial_hot_set(5, num_layers=3, num_experts=2, split="static") == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]


def test_uniform_split_gives_every_layer_its_share():
    hot = initial_hot_set(7, num_layers=3, num_experts=4, split="uniform")
    assert [sum(1 for layer, _ in hot if layer == i) for i in range(3)] == [3, 2, 2]


def test_profile_picks_the_most_routed_experts_across_layers():
    counts = torch.tensor([[5, 0, 9], [7, 7, 1]])
    assert initial_hot_set(3, 2, 3, "static", counts) == [(0, 2), (1, 0), (1, 1)]


def test_zero_copy_set_takes_the_most_routed_experts_outside_the_hot_set():
    resident = torch.tensor([[True, False, False, False], [False, False, True, True]])
    assert zero_copy_set(0.5, resident) == [(0, 1), (0, 2), (1, 0), (1, 1)]  # no profile: the lowest ids outside
    counts = torch.tensor([[9, 1, 2, 8], [0, 5, 7, 7]])
    assert zero_copy_set(0.5, resident, counts) == [(0, 3), (0, 2), (1, 1), (1, 0)]
    assert zero_copy_set(0.0, resident, counts) == [] and len(zero_copy_set(1.0, resident)) == 5  # only the outside
    # of_missed (zero_copy_frac auto): a share of each layer's experts without a slot, 3 and 2 here
    assert zero_copy_set(0.5, resident, counts, of_missed=True) == [(0, 3), (0, 2), (1, 1)]
    assert zero_copy_set(0.7, resident, of_missed=True) == [(0, 1), (0, 2), (1, 0)]


def test_plan_swaps_trades_cold_residents_for_hot_misses_above_the_threshold():
    counts = torch.tensor([[10, 1, 0, 50], [3, 4, 12, 0]])
    resident = torch.tensor([[True, True, True, False], [True, False, False, False]])
    # residents by use: (0,2)=0, (0,1)=1, (1,0)=3, (0,0)=10; misses: (0,3)=50, (1,2)=12, (1,1)=4
    assert plan_swaps(counts, resident, threshold=0.0, max_swaps=10) == [((0, 2), (0, 3)), ((0, 1), (1, 2)),
                                                                         ((1, 0), (1, 1))]
    # 4 is not above 1.5 x 3
    assert plan_swaps(counts, resident, threshold=0.5, max_swaps=10) == [((0, 2), (0, 3)), ((0, 1), (1, 2))]
    assert plan_swaps(counts, resident, threshold=0.0, max_swaps=1) == [((0, 2), (0, 3))]
    assert plan_swaps(counts, torch.ones_like(resident), 0.0, 10) == []


def test_profile_round_trip(tmp_path):
    path = str(tmp_path / "sub" / "profile.json")
    counts = torch.tensor([[1, 2, 3], [4, 5, 6]])
    save_profile(path, counts, "Qwen3MoeForCausalLM", steps=7)
    assert torch.equal(load_profile(path, 2, 3), counts)
    assert json.load(open(path))["steps"] == 7
    with pytest.raises(ValueError, match="2 MoE layers of 4 experts"):
        load_profile(path, 2, 4)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"counts": [[1]]}', "not a strata expert profile"),
    ('{"format": "strata-expert-profile", "counts": [[1, -2]]}', "negative counts"),
])
def test_bad_profile_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_profile(str(path), 1, 2)


@pytest.mark.parametrize("cache, total, slots", [("auto", 24, 24), ("all", 24, 24), ("10", 24, 10), ("99", 24, 24),
                                                 ("0", 24, 0), ("25%", 24, 6), ("0%", 24, 0), (" 100% ", 24, 24)])
def test_expert_cache_values(cache, total, slots):
    assert ExpertConfig(expert_cache=cache).validated().num_slots(total) == slots


@pytest.mark.parametrize("overrides, message", [
    (dict(expert_cache="lots"), "expert_cache must be auto, all, a number of slots"),
    (dict(expert_cache="150%"), "expert_cache must be"),
    (dict(expert_cache="-3"), "expert_cache must be"),
    (dict(expert_split="random"), "expert_split must be one of uniform, static"),
    (dict(cpu_threads=-1), "cpu_threads must be an integer >= 0"),
    (dict(pcie_frac=1.5), r"pcie_frac must be auto or a number in \[0, 1\]"),
    (dict(pcie_frac="half"), r"pcie_frac must be auto or a number in \[0, 1\]"),
    (dict(zero_copy_frac=1.5), r"zero_copy_frac must be auto, measure or a number in \[0, 1\]"),
    (dict(zero_copy_frac="most"), r"zero_copy_frac must be auto, measure or a number in \[0, 1\]"),
    (dict(expert_swap_interval=-2), "expert_swap_interval must be"),
    (dict(expert_swap_threshold=-0.1), "expert_swap_threshold must be >= 0"),
    (dict(expert_budget=-1), "expert_budget must be"),
])
def test_bad_config_values_give_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        ExpertConfig(**overrides)


def test_cli_rejects_a_bad_expert_cache_before_loading(capsys, tiny_model_dir, monkeypatch):
    import strata.engine.build

    monkeypatch.setattr(strata.engine.build, "build_model", lambda *a, **k: pytest.fail("weights loaded"))
    code = main(["generate", tiny_model_dir("qwen3_moe"), "--prompt", "x", "--device", "cpu",
                 "--expert-cache", "half"])
    assert code == 2
    assert "expert_cache must be auto, all" in capsys.readouterr().err


def test_pcie_share_balances_the_cpu_pool_against_the_copies():
    from strata.experts.calibrate import balanced_pcie_share

    # 16 threads at 8 ms per expert = 0.5 ms per expert; copies 0.5 ms each: half the misses each way
    assert balanced_pcie_share(0.008, 16, 0.0005) == pytest.approx(0.5)
    assert balanced_pcie_share(0.008, 1, 0.0005) == pytest.approx(0.008 / 0.0085)
    assert balanced_pcie_share(0.008, 16, 0.0) == 0.0


def test_in_place_share_balances_the_cpu_pool_against_the_device_reads():
    from strata.experts.calibrate import balanced_in_place_share

    # the H200 host (session 42): pool 90 us + 53 us a pair, in-place reads 115 us a pair, 5.67 missed pairs a layer
    assert balanced_in_place_share(90e-6, 53e-6, 115e-6, 5.67) == pytest.approx(0.41, abs=0.01)
    # PCIe half as fast: fewer pairs read in place; no fixed cost: the per-pair ratio alone
    assert balanced_in_place_share(90e-6, 53e-6, 230e-6, 5.67) == pytest.approx(0.243, abs=0.01)
    assert balanced_in_place_share(0.0, 50e-6, 50e-6, 4.0) == pytest.approx(0.5)
    # clamped: a pool that costs more than reading everything in place; nothing missed; no device reads measured
    assert balanced_in_place_share(1e-3, 50e-6, 10e-6, 2.0) == 1.0
    assert balanced_in_place_share(90e-6, 53e-6, 115e-6, 0.0) == 0.0
    assert balanced_in_place_share(90e-6, 53e-6, 0.0, 5.0) == 0.0


def test_pcie_frac_auto_is_zero_without_a_gpu(tiny_model_dir):
    from strata import LLM

    llm = LLM(tiny_model_dir("qwen3_moe"), device="cpu", dtype="float32", expert_cache="50%", pcie_frac="auto")
    assert llm.engine.experts.pcie_frac == 0.0
    assert llm.engine.experts.slots.num_staging == 0


def test_weight_sizes_split_experts_from_the_rest():
    from strata.model.registry import model_class
    from strata.runner.memory import meta_model, weight_sizes
    from strata.weights.source import open_source

    cfg = open_source("random:qwen3-30b-a3b?num_hidden_layers=3&hidden_size=64&moe_intermediate_size=16"
                      "&intermediate_size=32&num_attention_heads=2&num_key_value_heads=1&vocab_size=100").model_config()
    sizes = weight_sizes(meta_model(model_class(cfg), cfg), torch.bfloat16)
    per_expert = 3 * 16 * 64 * 2
    assert sizes.num_experts == 3 * cfg.num_experts
    assert sizes.experts == sizes.num_experts * per_expert
    assert sizes.on_device(sizes.num_experts) == sizes.total
    assert sizes.on_device(10) == sizes.total - (sizes.num_experts - 10) * per_expert


def test_experts_can_be_built_apart_from_the_rest_with_the_same_random_weights():
    """A partial expert cache loads experts to host RAM (here: the meta device stands in for "elsewhere");
    random weights are drawn on the main device either way, so both builds hold the same values."""
    from strata.model.moe import LocalExperts
    from strata.weights.loader import build_model
    from strata.weights.source import open_source

    spec = ("random:qwen3-30b-a3b?num_hidden_layers=2&hidden_size=64&moe_intermediate_size=16"
            "&intermediate_size=32&num_attention_heads=2&num_key_value_heads=1&vocab_size=100")
    apart = build_model(open_source(spec), "cpu", "float32", quiet=True, expert_device="meta")
    together = build_model(open_source(spec), "cpu", "float32", quiet=True)
    for (name, a), (_, b) in zip(apart.named_parameters(), together.named_parameters()):
        owner = apart.get_submodule(name.rsplit(".", 1)[0])
        assert a.device.type == ("meta" if isinstance(owner, LocalExperts) else "cpu"), name
        if a.device.type == "cpu":
            assert torch.equal(a, b), name
