"""SamplingParams.prompt_logprobs against HF transformers on tiny random models (a MoE, a Gated DeltaNet
hybrid, Qwen4-Exp's hyper-connection head): each prompt token's logprob and its position's top alternatives
equal the log_softmax of HF's logits at the row before it, whether the prompt runs whole or in chunks, beside
other requests or with speculation; a prompt in the prefix cache is still computed whole for them, and requests
without them keep using the cache."""

from __future__ import annotations

import pytest
import torch

from strata import LLM, SamplingParams
from tiny_models import build_hf_model

PROMPT = [1, 17, 99, 23, 5, 140, 77, 3, 64, 12, 150, 8, 31, 42, 9, 100, 55, 66, 120, 7, 88, 19]
TOP = 3


def hf_logprobs(family: str, prompt: list[int]) -> torch.Tensor:
    """[T, V] HF's log_softmax at every prompt position (float32)."""
    with torch.no_grad():
        logits = build_hf_model(family).float()(torch.tensor([prompt])).logits[0]
    return logits.float().log_softmax(dim=-1)


def assert_matches_hf(entries, prompt: list[int], reference: torch.Tensor, top: int = TOP) -> None:
    assert len(entries) == len(prompt) and entries[0] is None
    for position in range(1, len(prompt)):
        entry, row = entries[position], reference[position - 1]
        token = prompt[position]
        assert entry[token].logprob == pytest.approx(row[token].item(), abs=2e-4), position
        assert entry[token].rank == 1 + int((row > row[token]).sum()), position  # vLLM's rank: 1 + more likely
        top_ids = row.topk(top).indices.tolist()
        # the top alternatives and the prompt's token, nothing else (the token may be one of the top)
        assert set(entry) == set(top_ids) | {token}, position
        for rank, token_id in enumerate(top_ids, start=1):
            assert entry[token_id].logprob == pytest.approx(row[token_id].item(), abs=2e-4)
            assert entry[token_id].rank == rank


def make_llm(folder: str, **options) -> LLM:
    return LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, **options)


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next", "qwen4_exp"])
def test_prompt_logprobs_equal_hf_whole_and_chunked(family, tiny_model_dir):
    reference = hf_logprobs(family, PROMPT)
    params = SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=TOP)
    whole = make_llm(tiny_model_dir(family)).generate({"prompt_token_ids": PROMPT}, params)[0]
    assert_matches_hf(whole.prompt_logprobs, PROMPT, reference)
    # prompts of 22 tokens in chunks of 8 (three steps; the first two sample nothing)
    chunked = make_llm(tiny_model_dir(family), max_num_batched_tokens=8).generate({"prompt_token_ids": PROMPT},
                                                                                  params)[0]
    assert_matches_hf(chunked.prompt_logprobs, PROMPT, reference)
    assert chunked.outputs[0].token_ids == whole.outputs[0].token_ids


def test_only_the_prompt_token_with_zero_alternatives_and_none_unasked(tiny_model_dir):
    llm = make_llm(tiny_model_dir("qwen3_moe"))
    reference = hf_logprobs("qwen3_moe", PROMPT)
    out = llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(temperature=0.0, max_tokens=1,
                                                                    prompt_logprobs=0))[0]
    assert [set(e) for e in out.prompt_logprobs[1:]] == [{t} for t in PROMPT[1:]]
    assert_matches_hf(out.prompt_logprobs, PROMPT, reference, top=0)
    plain = llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(temperature=0.0, max_tokens=1))[0]
    assert plain.prompt_logprobs is None


def test_beside_other_requests_and_through_the_prefix_cache(tiny_model_dir):
    """Four requests share steps (two asking, of other lengths); then the same prompt again, now in the prefix
    cache: the request asking computes it whole (nothing cached), one not asking reads the cache."""
    llm = make_llm(tiny_model_dir("qwen3_next"), max_num_batched_tokens=16)
    short = PROMPT[:9]
    params = SamplingParams(temperature=0.0, max_tokens=3, prompt_logprobs=TOP)
    plain = SamplingParams(temperature=0.0, max_tokens=3)
    outs = llm.generate([{"prompt_token_ids": PROMPT}, {"prompt_token_ids": [4, 5, 6, 7, 8, 9, 10, 11, 12, 13]},
                         {"prompt_token_ids": short}, {"prompt_token_ids": [30, 31, 32]}],
                        [params, plain, params, plain])
    assert_matches_hf(outs[0].prompt_logprobs, PROMPT, hf_logprobs("qwen3_next", PROMPT))
    assert_matches_hf(outs[2].prompt_logprobs, short, hf_logprobs("qwen3_next", short))
    assert outs[1].prompt_logprobs is None and outs[3].prompt_logprobs is None
    again = llm.generate({"prompt_token_ids": PROMPT}, params)[0]
    assert again.num_cached_tokens == 0
    assert_matches_hf(again.prompt_logprobs, PROMPT, hf_logprobs("qwen3_next", PROMPT))
    cached = llm.generate({"prompt_token_ids": PROMPT}, plain)[0]
    assert cached.num_cached_tokens > 0 and cached.outputs[0].token_ids == again.outputs[0].token_ids


def test_with_suffix_speculation(tiny_model_dir):
    llm = make_llm(tiny_model_dir("qwen3_next"),
                   speculative_config={"method": "suffix", "num_speculative_tokens": 3})
    prompt = PROMPT + PROMPT[1:9]  # a repeat the suffix drafter proposes from
    out = llm.generate({"prompt_token_ids": prompt}, SamplingParams(temperature=0.0, max_tokens=8,
                                                                    prompt_logprobs=TOP))[0]
    assert_matches_hf(out.prompt_logprobs, prompt, hf_logprobs("qwen3_next", prompt))


def test_out_of_range_is_refused():
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next"])
def test_prompt_logprobs_from_cuda_graph_replays_equal_the_eager_steps(family, tiny_model_dir):
    """On CUDA fresh prompts replay prompt graphs (padded rows, several prompts a graph): the rows read for the
    prompt logprobs are each prompt's own. In bfloat16 (graphs need 16-bit experts; a float32 MoE runs eagerly):
    each entry is the same engine's without graphs, and near HF's float32 one on average over the prompt: bfloat16
    moves single entries by up to ~0.7 nat (session 48, H100), a row of another position moves them all (these models'
    log-probabilities spread 1.6 over the vocabulary)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    prompts = [PROMPT, PROMPT[:13]]
    params = SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=TOP)
    runs = {}
    for graphs in (True, False):
        llm = LLM(tiny_model_dir(family), dtype="bfloat16", device="cuda", max_num_seqs=4, block_size=4,
                  cuda_graphs=graphs)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
        runs[graphs] = [out.prompt_logprobs for out in outs]
        if graphs:
            stats = llm.engine.runner.graph_stats()
            assert stats is not None and stats["replays"] > 0
        del llm
        torch.cuda.empty_cache()
    for prompt, replayed, eager in zip(prompts, runs[True], runs[False]):
        reference = hf_logprobs(family, prompt)
        assert replayed[0] is None and eager[0] is None
        own, shifted = [], []  # |error| against HF's row of the same position, and of the position before
        for position in range(1, len(prompt)):
            token = prompt[position]
            got = replayed[position][token].logprob
            assert got == pytest.approx(eager[position][token].logprob, abs=5e-2)
            own.append(abs(got - reference[position - 1, token].item()))
            if position > 1:
                shifted.append(abs(got - reference[position - 2, token].item()))
        assert sum(own) / len(own) < 0.3 and sum(own) / len(own) < sum(shifted) / len(shifted) / 2


def test_preempted_requests_keep_their_prompt_logprobs(tiny_model_dir):
    """Too few KV blocks for three requests at once: some are preempted (before or after their first token) and
    recomputed; each still gets its prompt logprobs once, equal to HF's, and the tokens of a run with room."""
    prompts = [PROMPT[:10], PROMPT[5:15], PROMPT[8:18]]
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, prompt_logprobs=1)
    roomy = make_llm(tiny_model_dir("qwen3_moe")).generate([{"prompt_token_ids": p} for p in prompts], params)
    tight = make_llm(tiny_model_dir("qwen3_moe"), num_gpu_blocks=14, max_model_len=48)
    outs = tight.generate([{"prompt_token_ids": p} for p in prompts], params)
    assert sum(o.metrics["num_preemptions"] for o in outs) > 0
    for prompt, out, ref in zip(prompts, outs, roomy):
        assert out.outputs[0].token_ids == ref.outputs[0].token_ids
        assert_matches_hf(out.prompt_logprobs, prompt, hf_logprobs("qwen3_moe", prompt), top=1)
