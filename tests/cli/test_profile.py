"""`strata profile`: the routing profile of a workload, written where asked."""

import json

from strata.cli.main import main
from strata.engine.llm import LLM


def test_profile_runs_prompts_eagerly_and_writes_every_layers_counts(tmp_path, tiny_model_dir, monkeypatch):
    """A multi-prompt CUDA graph's routing statistics take padding rows in place of real ones, so the
    profile's engine keeps prompt graphs off; every MoE layer's counts add up to the routed pairs."""
    seen = []
    from_config = LLM.from_config
    monkeypatch.setattr(LLM, "from_config", classmethod(
        lambda cls, config, **kw: (seen.append(config), from_config.__func__(cls, config, **kw))[1]))
    out = tmp_path / "profile.json"
    assert main(["profile", tiny_model_dir("qwen3_moe"), "--output", str(out), "--max-tokens", "4"]) == 0
    assert seen[0].runner.cuda_graph_prompt_tokens == 0
    counts = json.loads(out.read_text())["counts"]
    assert len(counts) == 3 and len({sum(layer) for layer in counts}) == 1 and sum(counts[0]) > 0  # 3 MoE layers
