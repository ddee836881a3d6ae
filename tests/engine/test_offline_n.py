"""SamplingParams.n in the offline API (vLLM's): each prompt's RequestOutput holds n CompletionOutputs, indexed; a
seeded request's choice 0 is its n = 1 answer and its choices are reproducible and differ; greedy choices agree;
the other choices read the prompt from the prefix cache; an engine request itself is one choice."""

from __future__ import annotations

import pytest

from strata import LLM, SamplingParams
from strata.engine.core import EngineCore
from strata.types import Request

PROMPTS = [{"prompt_token_ids": [1, 17, 99, 23, 5, 140, 77, 3, 64, 12]}, {"prompt_token_ids": [1, 44, 45, 46, 9]}]


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir("qwen3_moe"), dtype="float32", device="cpu", max_num_seqs=8, block_size=4)


def tokens(output) -> list[list[int]]:
    return [c.token_ids for c in output.outputs]


def test_n_choices_per_prompt_seeded_reproducible_and_choice_0_is_n_1(llm):
    sampled = SamplingParams(temperature=1.0, seed=7, max_tokens=12, ignore_eos=True, n=3)
    outs = llm.generate(PROMPTS, sampled)
    assert [len(o.outputs) for o in outs] == [3, 3] and all(o.finished for o in outs)
    assert [[c.index for c in o.outputs] for o in outs] == [[0, 1, 2]] * 2
    assert all(c.finish_reason == "length" and len(c.token_ids) == 12 for o in outs for c in o.outputs)
    assert [tokens(o) for o in llm.generate(PROMPTS, sampled)] == [tokens(o) for o in outs]
    one = llm.generate(PROMPTS, SamplingParams(temperature=1.0, seed=7, max_tokens=12, ignore_eos=True))
    assert [o.outputs[0].token_ids for o in one] == [o.outputs[0].token_ids for o in outs]
    assert all(len({tuple(t) for t in tokens(o)}) == 3 for o in outs)  # the choices sample apart


def test_greedy_choices_agree_and_share_the_cached_prompt(llm):
    llm.engine.scheduler.allocator.reset_prefix_cache()
    before = llm.engine.scheduler.cache_stats.as_dict()
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=6, n=4))[0]
    assert tokens(out) == [out.outputs[0].token_ids] * 4
    after = llm.engine.scheduler.cache_stats.as_dict()
    assert after["prefix_hits"] - before["prefix_hits"] >= 3  # each sibling read the prompt's cached blocks


def test_an_engine_request_is_one_choice(llm):
    with pytest.raises(ValueError, match="one choice"):
        llm.engine.validate(Request("x", [1, 2, 3], SamplingParams(n=2)))
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        SamplingParams(n=0)
    assert isinstance(llm.engine, EngineCore)
