"""fp8 KV (`--kv-cache-dtype fp8`): K and V stored as float8 e4m3, half the bytes of a 16-bit cache. Greedy
output equals the 16-bit cache's wherever the reference run's top-2 logprob margin is wide enough for the
rounding of K and V (float8 keeps 3 mantissa bits: ~6 % relative error per value); the pool really holds
float8; parking to host RAM and back keeps the bytes; the memory plan counts one byte a value."""

from __future__ import annotations

import pytest
import torch

from strata import LLM, SamplingParams

# the top-2 margin (nats) of the 16-bit run above which fp8 KV must pick the same token. Measured on these
# prompts: float8's rounding of K and V (3 mantissa bits) moved the tiny random models' top logprob by up to
# 0.69 nats, and the widest margin at which the chosen token changed was 0.74 (random weights make large
# K / V values; a trained model's move far less)
MARGIN = 1.0


def _next_token_and_margin(llm: LLM, prompts):
    """Greedy next token and top-2 logprob margin after each prompt."""
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=2)
    found = []
    for out in llm.generate([{"prompt_token_ids": p} for p in prompts], params):
        step = out.outputs[0].logprobs[0]
        top = sorted((lp.logprob if hasattr(lp, "logprob") else lp for lp in step.values()), reverse=True)
        found.append((out.outputs[0].token_ids[0], top[0] - top[1], top[0]))
    return found


def teacher_forced(model_dir: str) -> tuple[list[list[int]], list[tuple]]:
    """The float32 run's greedy continuation of five prompts, cut after every token -> (those prompts, the
    run's next token, top-2 margin and top logprob after each)."""
    heads = [[5, 9, 13, 2, 7] * 4, list(range(3, 40)), [11, 4] * 9, [60, 7, 33, 21] * 6, list(range(90, 50, -2))]
    ref = LLM(model_dir, dtype="float32", device="cpu", max_num_seqs=4)
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    continuations = [o.outputs[0].token_ids for o in ref.generate([{"prompt_token_ids": h} for h in heads], params)]
    prompts = [head + tail[:i] for head, tail in zip(heads, continuations) for i in range(len(tail))]
    return prompts, _next_token_and_margin(ref, prompts)


@pytest.mark.parametrize("family", ["llama", "qwen3_next", "qwen4_exp"])
def test_fp8_kv_greedy_equals_16_bit_kv_where_the_margin_is_wide(family, tiny_model_dir):
    """Teacher-forced: the 16-bit run's greedy continuation of five prompts, cut after every token, is given
    to both caches as prompts (sharing prefix blocks, so cached float8 blocks are read back too); each
    next token must agree wherever the 16-bit margin exceeds MARGIN, and the top logprob move by less than 1."""
    prompts, expected = teacher_forced(tiny_model_dir(family))
    llm = LLM(tiny_model_dir(family), dtype="float32", device="cpu", kv_cache_dtype="fp8", max_num_seqs=4)
    caches = llm.engine.runner.kv_pool.caches  # attention layers by index; QSA's index keys stay float32
    assert {k.dtype for layer, (k, _) in caches.items() if isinstance(layer, int)} == {torch.float8_e4m3fn}
    got = _next_token_and_margin(llm, prompts)
    wide = [(e, g) for e, g in zip(expected, got) if e[1] > MARGIN]
    assert len(wide) >= 3  # the check covers some ground, not only near ties
    assert all(e[0] == g[0] for e, g in wide)
    assert max(abs(e[2] - g[2]) for e, g in zip(expected, got)) < 1.0


def test_fp8_kv_blocks_park_in_host_ram_and_come_back_byte_for_byte():
    from strata.cache.pools import CheckpointPool, HostParkPool, KVPool, StatePool

    pool = KVPool([0, 3], num_blocks=6, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.float32,
                  device="cpu", kv_dtype=torch.float8_e4m3fn)
    for k, v in pool.caches.values():
        k.copy_(torch.randn(k.shape).to(k.dtype))
        v.copy_(torch.randn(v.shape).to(v.dtype))
    before = {layer: (k.clone(), v.clone()) for layer, (k, v) in pool.caches.items()}
    park = HostParkPool(pool, CheckpointPool(StatePool({}, 1, torch.float32, "cpu"), 0), num_block_rows=3,
                        num_checkpoint_rows=0)
    park.park_blocks([(1, 0), (4, 2)])
    for k, v in pool.caches.values():
        k.zero_(), v.zero_()
    park.restore_blocks([(0, 1), (2, 4)])
    for layer, (k, v) in pool.caches.items():
        for now, then in ((k, before[layer][0]), (v, before[layer][1])):
            assert torch.equal(now[[1, 4]].view(torch.uint8), then[[1, 4]].view(torch.uint8))
            assert not now[[0, 2, 3, 5]].view(torch.uint8).any()


def test_the_memory_plan_counts_fp8_kv_at_one_byte_a_value():
    from strata.config import CacheConfig, EngineConfig, ModelConfig, SpecConfig
    from strata.engine.memory_plan import MemoryPlan

    cfg = ModelConfig(architecture="LlamaForCausalLM", vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    plans = {kv: MemoryPlan(EngineConfig(model="x", cache=CacheConfig(kv_cache_dtype=kv, block_size=16)), cfg,
                            SpecConfig(), 256, "cpu", torch.bfloat16, False, {}) for kv in ("auto", "fp8")}
    assert plans["fp8"].block_bytes * 2 == plans["auto"].block_bytes == 2 * 2 * 16 * 2 * 8 * 2


def test_kv_cache_dtypes_offered_and_refused():
    from strata.config import CacheConfig, kv_cache_torch_dtype

    assert kv_cache_torch_dtype(CacheConfig(kv_cache_dtype="fp8").kv_cache_dtype, torch.bfloat16) == torch.float8_e4m3fn
    assert kv_cache_torch_dtype("auto", torch.float16) == torch.float16
    with pytest.raises(ValueError, match="must be one of auto, fp8, fp8_e4m3, int8, got 'fp8_e5m2'"):
        CacheConfig(kv_cache_dtype="fp8_e5m2")
