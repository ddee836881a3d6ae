"""The native CPU stack of plain decoder layers (strata/model/cpu_stack.py): decode steps, verification windows and
prompt chunks of a packed float32 Llama (or Qwen3) run on it and give the per-module path's tokens and logprobs, with
exact or int8 products; models it cannot run keep their layers, and so do steps of longer windows than its bound."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gguf_writer import write_gguf
from strata import LLM, SamplingParams
from strata.model import cpu_stack
from strata.model.cpu_stack import DenseStack
from tiny_models import build_hf_model, hf_state

PROMPTS = [[5, 17, 99, 3, 42, 150, 8], [77, 61, 12], [130, 64, 9, 9, 31, 120, 44, 7, 18, 101, 23]]


def packed_gguf(tmp_path_factory, family: str) -> str:
    """A tiny model as a GGUF of packed types the stack reads, qkv and gate/up each of two types."""
    path = str(tmp_path_factory.mktemp(f"stack-{family}") / "model.gguf")
    write_gguf(path, *hf_state(build_hf_model(family)), quant="Q4_1",
               types={r"attn_q\.": "Q8_0", r"attn_k\.": "Q5_0", r"ffn_up": "Q8_0", r"ffn_down": "Q4_0"})
    return path


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def llama_gguf(request, tmp_path_factory):
    """Llama's layers, and Qwen3's (the same with RMSNorms of the query and key heads)."""
    return packed_gguf(tmp_path_factory, request.param)


def generate(llm: LLM, stack: bool, params: SamplingParams, prompts=PROMPTS):
    """Token ids and logprobs of `prompts` with the stack on or off, from an empty prefix cache."""
    model = llm.engine.runner.model
    model.forget_cpu_stack()
    if not stack:
        model._stack = None
    llm.engine.scheduler.allocator.reset_prefix_cache()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    return [o.outputs[0] for o in outputs]


def assert_same_outputs(on, off, atol: float) -> None:
    """The same tokens, and each position's top logprobs for the same ids within `atol`."""
    for a, b in zip(on, off, strict=True):
        assert a.token_ids == b.token_ids
        for mine, theirs in zip(a.logprobs, b.logprobs):
            assert mine.keys() == theirs.keys()
            np.testing.assert_allclose([mine[t].logprob for t in mine], [theirs[t].logprob for t in mine], atol=atol)


def test_decode_steps_run_on_the_stack_with_the_layers_tokens_and_logprobs(llama_gguf, monkeypatch):
    llm = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, cpu_matmul="exact")
    steps = []
    run = DenseStack.run
    monkeypatch.setattr(DenseStack, "run", lambda self, hidden, ctx: steps.append(ctx.query_lens) or
                        run(self, hidden, ctx))
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=3)
    on = generate(llm, True, params)
    # the prompts' step, then the decode steps
    assert steps == [tuple(map(len, PROMPTS))] + [(1, 1, 1)] * 23
    assert isinstance(llm.engine.runner.model._stack, DenseStack)
    steps.clear()
    off = generate(llm, False, params)
    assert not steps
    assert_same_outputs(on, off, atol=1e-4)


def test_long_prompts_and_their_chunks_run_on_the_stack_with_the_layers_tokens_and_logprobs(llama_gguf, monkeypatch):
    """Prompts of 40 and 75 tokens in chunks of up to 32 (the second chunk of each attends to the first's KV), then
    a prompt that shares the first one's prefix (reused blocks): every step on the stack, the per-module path's
    tokens and logprobs. With the stack's bound below a chunk's length, those steps keep the layers, the same tokens."""
    llm = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, cpu_matmul="exact",
              max_num_batched_tokens=32)
    prompts = [[(7 * i + 3) % 150 + 2 for i in range(40)], [(11 * i + 5) % 150 + 2 for i in range(75)]]
    steps = []
    run = DenseStack.run
    monkeypatch.setattr(DenseStack, "run", lambda self, hidden, ctx: steps.append(ctx.query_lens) or
                        run(self, hidden, ctx))
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=3)
    on = generate(llm, True, params, prompts)
    assert max(max(lens) for lens in steps) > 16  # prompt chunks, not only windows, ran on the stack
    reused = llm.generate([{"prompt_token_ids": prompts[0][:36] + [9, 10, 11]}], params)[0]
    assert reused.num_cached_tokens > 0
    steps.clear()
    off = generate(llm, False, params, prompts)
    assert not steps
    assert_same_outputs(on, off, atol=1e-4)
    llm.engine.scheduler.allocator.reset_prefix_cache()  # the same prompt cold, per module
    cold = llm.generate([{"prompt_token_ids": prompts[0][:36] + [9, 10, 11]}], params)[0]
    assert cold.num_cached_tokens == 0 and reused.outputs[0].token_ids == cold.outputs[0].token_ids
    monkeypatch.setattr(cpu_stack, "STACK_MAX_QUERY_LEN", 16)  # 32-token chunks no longer take the stack
    steps.clear()
    bounded = generate(llm, True, params, prompts)
    assert steps and max(max(lens) for lens in steps) <= 16
    assert [o.token_ids for o in bounded] == [o.token_ids for o in off]


def test_a_slot_outside_the_pool_is_an_error_not_a_write(llama_gguf, monkeypatch):
    llm = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4)
    contexts = []
    run = DenseStack.run
    monkeypatch.setattr(DenseStack, "run", lambda self, hidden, ctx: contexts.append(ctx) or run(self, hidden, ctx))
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    expected = [o.token_ids for o in generate(llm, True, params)]
    model, ctx = llm.engine.runner.model, contexts[-1]
    pool = ctx.kv_caches[0][0]
    bad = dataclasses.replace(ctx, slot_mapping=ctx.slot_mapping + pool.shape[0] * pool.shape[1])
    hidden = model.model.embed_tokens(torch.zeros(ctx.slot_mapping.shape[0], dtype=torch.long))
    with pytest.raises(RuntimeError, match="KV slot outside the pool"):
        model._stack.run(hidden, bad)
    assert [o.token_ids for o in generate(llm, True, params)] == expected  # the engine goes on as before


def test_verification_windows_on_the_stack_give_plain_decoding(llama_gguf, monkeypatch):
    """Suffix drafts of a repetitive prompt: windows of several queries a sequence, on the stack."""
    windows = []
    run = DenseStack.run
    monkeypatch.setattr(DenseStack, "run", lambda self, hidden, ctx: windows.append(max(ctx.query_lens)) or
                        run(self, hidden, ctx))
    prompts = [[5, 17, 99, 3] * 6, [77, 61, 12, 40, 41] * 4]
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    plain = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4)
    spec = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4,
               speculative_config={"method": "suffix", "num_speculative_tokens": 3, "adaptive": False})
    expected = [o.token_ids for o in generate(plain, True, params, prompts)]
    windows.clear()
    assert [o.token_ids for o in generate(spec, True, params, prompts)] == expected
    assert max(windows) > 1  # some step verified drafts on the stack


def test_int8_activations_on_the_stack_give_the_layers_int8_products(llama_gguf):
    """--cpu-matmul int8: the stack multiplies each segment with quant_matmul as the per-module path does. Rows that
    differ by a norm's ulp may round to other int8 values, so later positions agree within int8's own error (the
    per-module int8 path's logprobs are up to ~0.2 off the exact path's on this model), not to the bit."""
    llm = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, cpu_matmul="int8")
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=3)
    on = generate(llm, True, params)
    assert isinstance(llm.engine.runner.model._stack, DenseStack)
    assert all(layer.int8 for layer in llm.engine.runner.model._stack.native.weights)
    off = generate(llm, False, params)
    assert_same_outputs(on, off, atol=0.2)


def test_models_the_stack_cannot_run_keep_their_layers(llama_gguf, tiny_model_dir, monkeypatch):
    for family in ("llama", "qwen3_moe"):  # dense float32 weights (an HF folder); routed experts
        other = LLM(tiny_model_dir(family), dtype="float32", device="cpu", max_num_seqs=2)
        assert other.engine.runner.model._cpu_stack() is None
    monkeypatch.setenv("STRATA_NO_CPU_STACK", "1")
    exact = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=2)
    assert exact.engine.runner.model._cpu_stack() is None
    out = exact.generate([{"prompt_token_ids": PROMPTS[0]}], SamplingParams(temperature=0.0, max_tokens=4))
    assert len(out[0].outputs[0].token_ids) == 4


def test_preempted_requests_on_the_stack_lose_nothing(llama_gguf, monkeypatch):
    """A KV pool too small for every request: preempted requests come back (their prompts and tokens run again,
    windows of up to 64 tokens on the stack) and give what a roomy pool gives."""
    prompts = [{"prompt_token_ids": list(range(3 + i, 14 + 2 * i))} for i in range(4)]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    roomy = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, max_model_len=64)
    tight = LLM(llama_gguf, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, max_model_len=64,
                num_gpu_blocks=24)
    expected = [o.outputs[0].token_ids for o in roomy.generate(prompts, params)]
    squeezed = tight.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in squeezed] == expected
    assert sum(o.metrics["num_preemptions"] for o in squeezed) > 0
    assert isinstance(tight.engine.runner.model._stack, DenseStack)
