"""An engine built on another engine's model (a benchmark's no-speculation baseline) shares the
weights, owns its KV cache and scheduler, and decodes exactly as an engine that loaded the model."""

from __future__ import annotations

import dataclasses

from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SpecConfig

PARAMS = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
PROMPTS = [{"prompt_token_ids": [3 + i, 17, 40 + 7 * i, 9]} for i in range(3)]


def _tokens(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)]


def test_a_baseline_on_a_shared_model_decodes_like_its_own_engine(tiny_model_dir):
    config = EngineConfig(model=tiny_model_dir("qwen3_moe"), runner=RunnerConfig(device="cpu", dtype="float32"),
                          speculative=SpecConfig(method="suffix", num_speculative_tokens=2))
    spec = LLM.from_config(config)
    plain = dataclasses.replace(config, speculative=SpecConfig())
    baseline = LLM.from_config(plain, share_model_of=spec)
    assert baseline.engine.runner.model is spec.engine.runner.model
    assert baseline.engine.runner.kv_pool is not spec.engine.runner.kv_pool
    assert baseline.engine.experts is spec.engine.experts  # the model's expert manager comes along
    reference = _tokens(LLM.from_config(plain))
    assert _tokens(baseline) == reference
    assert _tokens(spec) == reference  # greedy speculation commits the same tokens
    assert _tokens(baseline) == reference  # and the baseline is unaffected by the other engine's steps
