"""int8 KV (`--kv-cache-dtype int8`): K and V stored as int8 with a float32 scale per (token, KV head) vector
(strata/kernels/kv_quant.py), the scales paged beside them. Greedy output equals the 16-bit cache's wherever the
reference run's top-2 margin is wide enough for int8's rounding (half a step of absmax / 127 per value, far
finer than fp8's 3 mantissa bits); the pool really holds int8 and scales; parking to host RAM and sessions on
disk move both byte for byte; the memory plan counts one byte a value and four a vector's scale."""

from __future__ import annotations

import pytest
import torch

from strata import LLM, SamplingParams
from strata.config import kv_scale_key
from test_kv_fp8 import _next_token_and_margin, teacher_forced

# the top-2 margin (nats) of the 16-bit run above which int8 KV must pick the same token. Measured on these
# prompts (float32 models, int8 against float32 KV): the top logprob moved by at most 0.104 nats (llama; 0.042
# qwen3_next, 0.007 qwen4_exp), and the widest margin at which the chosen token changed was 0.041 (2 of 100
# llama prompts; none elsewhere). fp8 on the same prompts: 0.69 and 0.73. A margin moves by at most about
# twice the top logprob's move, so 0.25 leaves room; the top logprob must move by less than 0.25 as well.
MARGIN = 0.25


@pytest.mark.parametrize("family", ["llama", "qwen3_next", "qwen4_exp"])
def test_int8_kv_greedy_equals_16_bit_kv_where_the_margin_is_wide(family, tiny_model_dir):
    """Teacher-forced as in test_kv_fp8: the 16-bit run's greedy continuation of five prompts, cut after every
    token, is given to both caches as prompts (sharing prefix blocks, so cached int8 blocks and their scales
    are read back too); each next token must agree wherever the 16-bit margin exceeds MARGIN."""
    prompts, expected = teacher_forced(tiny_model_dir(family))
    llm = LLM(tiny_model_dir(family), dtype="float32", device="cpu", kv_cache_dtype="int8", max_num_seqs=4)
    caches = llm.engine.runner.kv_pool.caches  # attention layers by index; QSA's index keys stay float32
    layers = [layer for layer in caches if isinstance(layer, int)]
    assert {t.dtype for layer in layers for t in caches[layer]} == {torch.int8}
    assert {t.dtype for layer in layers for t in caches[kv_scale_key(layer)]} == {torch.float32}
    index_keys = [pair[0] for key, pair in caches.items() if isinstance(key, tuple) and key[0] == "index"]
    assert bool(index_keys) == (family == "qwen4_exp") and all(t.dtype == torch.float32 for t in index_keys)
    got = _next_token_and_margin(llm, prompts)
    wide = [(e, g) for e, g in zip(expected, got) if e[1] > MARGIN]
    assert len(wide) >= 30  # the check covers most of the ground, not only near ties
    assert all(e[0] == g[0] for e, g in wide)
    assert max(abs(e[2] - g[2]) for e, g in zip(expected, got)) < MARGIN


def test_the_pool_holds_int8_values_and_their_scales(tiny_model_dir):
    """After a request, each written (token, head) vector of K and V has a positive scale and reaches +-127
    (its absmax); the rest of the pool is untouched."""
    llm = LLM(tiny_model_dir("llama"), dtype="float32", device="cpu", kv_cache_dtype="int8", max_num_seqs=2,
              block_size=4)
    llm.generate([{"prompt_token_ids": list(range(5, 22))}], SamplingParams(temperature=0.0, max_tokens=3))
    pool = llm.engine.runner.kv_pool
    for layer in [key for key in pool.caches if isinstance(key, int)]:
        for values, scale in zip(pool.caches[layer], pool.caches[kv_scale_key(layer)]):
            assert values.dtype == torch.int8 and scale.shape == values.shape[:3] and scale.dtype == torch.float32
            written = scale > 0                                                    # [N_blocks, B, Hkv]
            assert written.sum() == 19 * values.shape[2]  # 17 prompt tokens, 2 fed back (the 3rd is not written)
            assert values[written].abs().amax(-1).eq(127).all()
            assert not values[~written].any()


def _random_int8_pool():
    from strata.cache.pools import KVPool

    pool = KVPool([0, 3], num_blocks=6, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.float32,
                  device="cpu", kv_dtype=torch.int8)
    generator = torch.Generator().manual_seed(0)
    for key, pair in pool.caches.items():
        for t in pair:
            t.copy_(torch.randint(-127, 128, t.shape, generator=generator) if t.dtype == torch.int8
                    else torch.rand(t.shape, generator=generator))
    return pool


def test_int8_kv_blocks_and_scales_park_in_host_ram_and_come_back_byte_for_byte():
    from strata.cache.pools import CheckpointPool, HostParkPool, StatePool

    pool = _random_int8_pool()
    assert set(pool.caches) == {0, 3, kv_scale_key(0), kv_scale_key(3)}
    before = {key: tuple(t.clone() for t in pair) for key, pair in pool.caches.items()}
    park = HostParkPool(pool, CheckpointPool(StatePool({}, 1, torch.float32, "cpu"), 0), num_block_rows=3,
                        num_checkpoint_rows=0)
    park.park_blocks([(1, 0), (4, 2)])
    for pair in pool.caches.values():
        for t in pair:
            t.zero_()
    park.restore_blocks([(0, 1), (2, 4)])
    for key, pair in pool.caches.items():
        for now, then in zip(pair, before[key]):
            assert torch.equal(now[[1, 4]].view(torch.uint8), then[[1, 4]].view(torch.uint8))
            assert not now[[0, 2, 3, 5]].view(torch.uint8).any()


def test_an_int8_kv_session_saves_and_restores_its_bytes_and_is_refused_by_a_16_bit_cache(tiny_model_dir,
                                                                                        tmp_path):
    """A session of an int8-KV engine holds int8 K and V and their float32 scales; restored into another
    int8-KV engine, its blocks hold the file's bytes and the next tokens are the first engine's; an engine
    whose KV is in the model dtype refuses the file (409), naming the layout."""
    from strata.cache.block_allocator import chain_hashes
    from strata.cache.session_file import SessionReader
    from strata.runner.session_rows import kv_pools
    from strata.types import Request
    from test_session_jobs import GREEDY, drive, restore_fresh, restore_reply_of_a_model_dtype_engine, \
        save_then_continue

    folder, path = tiny_model_dir("qwen3_next"), str(tmp_path / "s")
    prompt = list(range(5, 42))
    engine, expected = save_then_continue(folder, path, prompt, "int8")
    saved = SessionReader(path)
    assert {saved.layout[f"kv.{name}"][0] for name in kv_pools(engine.runner) if name.startswith("kv_scale")} \
        == {torch.float32}

    fresh, fresh_jobs = restore_fresh(folder, path, "int8")
    blocks = [fresh.scheduler.allocator.cached_block(h, tuple(prompt[4 * i:4 * i + 4]))
              for i, h in enumerate(chain_hashes(prompt, 4, 9))]
    assert None not in blocks
    for name, pool in kv_pools(fresh.runner).items():
        assert torch.equal(pool[blocks].view(torch.uint8), saved.tensor(f"kv.{name}").view(torch.uint8)), name
    fresh.add_request(Request("restored", prompt + [1, 2, 3], GREEDY))
    tokens, cached, _ = drive(fresh, fresh_jobs)
    assert tokens["restored"] == expected and cached["restored"] == 36

    reply = restore_reply_of_a_model_dtype_engine(folder, path)
    assert not reply["ok"] and reply["status"] == 409 and "int8" in reply["error"]


def test_the_memory_plan_counts_int8_kv_at_one_byte_a_value_and_four_a_scale():
    from strata.config import CacheConfig, EngineConfig, ModelConfig, SpecConfig
    from strata.engine.memory_plan import MemoryPlan

    cfg = ModelConfig(architecture="LlamaForCausalLM", vocab_size=64, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    plans = {kv: MemoryPlan(EngineConfig(model="x", cache=CacheConfig(kv_cache_dtype=kv, block_size=16)), cfg,
                            SpecConfig(), 256, "cpu", torch.bfloat16, False, {}) for kv in ("auto", "int8")}
    # K and V x 2 layers x 16 tokens x 2 heads x (8 values + one scale)
    assert plans["auto"].block_bytes == 2 * 2 * 16 * 2 * 8 * 2
    assert plans["int8"].block_bytes == 2 * 2 * 16 * 2 * (8 * 1 + 4)
    pool = _random_int8_pool()  # the pool's bytes per block are what the plan counts
    per_block = sum(t[0].numel() * t.element_size() for pair in pool.caches.values() for t in pair)
    assert per_block == pool.bytes_per_block(2, 4, 2, 8, torch.int8)


def test_int8_is_offered():
    from strata.config import CacheConfig, kv_cache_torch_dtype

    assert kv_cache_torch_dtype(CacheConfig(kv_cache_dtype="int8").kv_cache_dtype, torch.bfloat16) == torch.int8



def test_int8_kv_greedy_output_is_the_same_with_mtp_speculation_on_or_off(tiny_model_dir):
    """Each token's K and V are quantized alone (one scale per token and head), so a token written inside a
    1 + k verification window holds the bytes it would hold written on its own: greedy output with MTP drafts
    (the MTP layer's own KV int8 too) equals the output without, for a batch of prompts."""
    batch = [{"prompt_token_ids": torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist()}
             for n in (5, 23, 40)]
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    outputs = {}
    for spec in (None, {"method": "mtp", "num_speculative_tokens": 3}):
        llm = LLM(tiny_model_dir("qwen3_next+mtp"), dtype="float32", device="cpu", kv_cache_dtype="int8",
                  max_num_seqs=4, speculative_config=spec)
        outputs[spec is None] = [o.outputs[0].token_ids for o in llm.generate(batch, params)]
    assert kv_scale_key(llm.engine.model_config.num_hidden_layers) in llm.engine.runner.kv_pool.caches  # MTP's
    assert llm.engine.scheduler.stats.num_draft_tokens > 0
    assert outputs[False] == outputs[True]
