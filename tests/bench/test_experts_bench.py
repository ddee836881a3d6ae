"""`strata bench experts` on a tiny skewed MoE: every arm runs, shares add up, the learned hot set is
filled from the recorded profile and serves more pairs from the device than the static split."""

import json

from strata.cli.main import main

TINY_SKEWED = ("random:qwen3-30b-a3b?num_hidden_layers=2&hidden_size=128&moe_intermediate_size=32"
               "&intermediate_size=64&num_attention_heads=4&num_key_value_heads=2&vocab_size=500"
               "&routing_skew=1.5")


def test_expert_cache_sweep(tmp_path):
    out = tmp_path / "experts.json"
    assert main(["bench", "experts", TINY_SKEWED, "--device", "cpu", "--cache-sizes", "25%,100%",
                 "--num-prompts", "2", "--output-len", "16", "--max-model-len", "256", "--output", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"learned_25%", "static_25%", "all_100%"}
    learned, static, full = results["learned_25%"], results["static_25%"], results["all_100%"]
    for entry in (learned, static):
        shares = entry["experts"]
        assert entry["resident_slots"] == entry["total_experts"] // 4
        assert abs(shares["gpu_hit_rate"] + shares["cpu_share"] + shares["pcie_share"] - 1.0) < 1e-9
        assert entry["output_tok_s"] > 0
    assert static["experts"]["swaps"] == 0
    assert learned["experts"]["gpu_hit_rate"] > static["experts"]["gpu_hit_rate"]
    assert full["resident_slots"] == full["total_experts"] and learned["speedup_vs_static"] > 0
