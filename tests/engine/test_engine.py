"""The engine end to end on the bundled model (real GGUF, real tokenizer) and tiny HF models:
parity with HF transformers on the same GGUF, batched = solo, seeded sampling, stop strings,
logprobs, bad input, preemption, and surviving a failing step."""

from __future__ import annotations

import os

import pytest
import torch

from strata import LLM, SamplingParams
from strata.engine.core import EngineCore
from strata.types import FinishReason, Request

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name three primes."}],
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


@pytest.fixture(scope="module")
def llm():
    # exact (the default): the packed weights' float32 values and float32 sums, HF's numbers
    return LLM(dtype="float32", device="cpu", max_num_seqs=8, cpu_matmul="exact")


@pytest.fixture(scope="module")
def hf_gguf(bundled_gguf):
    from transformers import AutoModelForCausalLM

    from fast_gguf import fast_gguf_arrays

    folder, name = os.path.split(bundled_gguf)
    with fast_gguf_arrays():
        return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


def test_bundled_chat_matches_hf_on_same_gguf(llm, hf_gguf):
    outputs = llm.chat(CHATS, GREEDY)
    for chat, out in zip(CHATS, outputs):
        prompt = llm.encode_chat(chat)
        ref = hf_gguf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=24,
                               eos_token_id=llm.engine.model_config.eos_token_ids[0], pad_token_id=2)
        ref_tokens = ref[0, len(prompt):].tolist()
        assert out.outputs[0].token_ids == ref_tokens, (out.outputs[0].text, llm.tokenizer.decode(ref_tokens))
        assert out.outputs[0].text.strip()
    assert "Paris" in outputs[0].outputs[0].text


def test_batched_equals_solo(llm):
    prompts = [{"prompt_token_ids": llm.encode_chat([{"role": "user", "content": "Count to " + str(n) + " " * n}])}
               for n in range(8)]
    prompts[3] = {"prompt_token_ids": prompts[3]["prompt_token_ids"] * 3}  # lengths differ widely
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    together = llm.generate(prompts, params)
    for prompt, batched in zip(prompts, together):
        solo = llm.generate(prompt, params)[0]
        assert batched.outputs[0].token_ids == solo.outputs[0].token_ids


def test_seeded_sampling_reproduces_alone_and_in_a_batch(llm):
    seeded = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=16, ignore_eos=True)
    other = SamplingParams(temperature=0.8, max_tokens=16, ignore_eos=True)
    prompt = "Once upon a time"
    alone = llm.generate(prompt, seeded)[0].outputs[0].token_ids
    again = llm.generate(prompt, seeded)[0].outputs[0].token_ids
    batch = llm.generate([prompt, "Hello", prompt], [other, other, seeded])[2].outputs[0].token_ids
    assert alone == again == batch
    different = llm.generate(prompt, SamplingParams(temperature=1.0, top_p=0.95, seed=99, max_tokens=16,
                                                    ignore_eos=True))[0].outputs[0].token_ids
    assert different != alone


def test_stop_string_cuts_exactly(llm):
    free = llm.chat(CHATS[0], GREEDY)[0].outputs[0].text
    stop = free[free.index("capital") + 2: free.index("capital") + 6]  # spans inside a word
    out = llm.chat(CHATS[0], SamplingParams(temperature=0.0, max_tokens=24, stop=[stop]))[0].outputs[0]
    assert out.text == free[: free.index(stop)]
    assert out.finish_reason == "stop"
    kept = llm.chat(CHATS[0], SamplingParams(temperature=0.0, max_tokens=24, stop=[stop],
                                             include_stop_str_in_output=True))[0].outputs[0]
    assert kept.text == free[: free.index(stop) + len(stop)]


def test_logprobs_of_each_generated_token(llm):
    out = llm.generate("The sky is", SamplingParams(temperature=0.0, max_tokens=5, logprobs=3,
                                                    ignore_eos=True))[0].outputs[0]
    assert len(out.logprobs) == len(out.token_ids) == 5
    for token, entry in zip(out.token_ids, out.logprobs):
        assert token in entry and len(entry) == 3  # greedy token is also the top-1
        assert entry[token].logprob == max(lp.logprob for lp in entry.values())
        assert all(lp.logprob <= 0 for lp in entry.values())


def test_max_tokens_and_eos_finish_reasons(llm):
    out = llm.chat(CHATS[0], SamplingParams(temperature=0.0, max_tokens=200))[0].outputs[0]
    assert out.finish_reason == "stop" and out.token_ids[-1] in llm.engine.model_config.eos_token_ids
    out = llm.chat(CHATS[0], SamplingParams(temperature=0.0, max_tokens=3))[0].outputs[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 3


@pytest.mark.parametrize("prompt, params, message", [
    ("", SamplingParams(), "empty"),
    ({"prompt_token_ids": [5] * 9000}, SamplingParams(), "max_model_len"),
    ({"prompt_token_ids": [10 ** 9]}, SamplingParams(), "token ids"),
])
def test_bad_prompts_raise_before_the_engine(llm, prompt, params, message):
    with pytest.raises(ValueError, match=message):
        llm.generate(["fine prompt", prompt], params)
    assert not llm.engine.has_unfinished()  # the valid prompt of the same call was not submitted either


@pytest.mark.parametrize("kwargs, field", [
    ({"max_tokens": 0}, "max_tokens"), ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
])
def test_bad_sampling_params_raise(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_preemption_loses_nothing(tiny_model_dir):
    folder = tiny_model_dir("qwen3_next")
    prompts = [{"prompt_token_ids": list(range(3 + i, 40 + 3 * i))} for i in range(4)]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    roomy = LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=4,
                max_model_len=128).generate(prompts, params)
    tight = LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, max_model_len=128,
                num_gpu_blocks=40)
    squeezed = tight.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in squeezed] == [o.outputs[0].token_ids for o in roomy]
    assert tight.engine.scheduler.allocator.num_free == 40


def test_admission_hold_changes_when_prompts_enter_not_what_they_generate(tiny_model_dir):
    """--admission-hold-steps on a hybrid model with suffix speculation: slots that free a step or two apart take
    their waiting prompts in one step, and every output equals admission at once."""
    folder = tiny_model_dir("qwen3_next")
    prompts = [{"prompt_token_ids": list(range(5 + i, 20 + 2 * i))} for i in range(6)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (6, 7, 8, 9, 10, 11)]
    outputs, joined = {}, {}
    for hold in (0, 3):
        llm = LLM(folder, dtype="float32", device="cpu", max_num_seqs=2, block_size=4, max_model_len=128,
                  admission_hold_steps=hold, speculative_config={"method": "suffix", "num_speculative_tokens": 2})
        scheduler, groups = llm.engine.scheduler, []
        schedule = scheduler.schedule

        def recording(*args, schedule=schedule, groups=groups, **kwargs):
            plan = schedule(*args, **kwargs)
            groups.append(len(plan.new_slots))
            return plan

        scheduler.schedule = recording
        outputs[hold] = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
        joined[hold] = sum(count == 2 for count in groups)
    assert outputs[3] == outputs[0] and [len(o) for o in outputs[0]] == [6, 7, 8, 9, 10, 11]
    assert joined[3] > joined[0], joined  # held prompts entered together more often


def test_admission_hold_defaults_to_one_step_for_moe_models_and_none_for_dense_ones(tiny_model_dir):
    """Unset, --admission-hold-steps is 1 on an MoE model (a prompt step reads most of its experts however many
    prompts it carries) and 0 on a dense one; a value given is kept."""
    def hold(family, **options):
        llm = LLM(tiny_model_dir(family), dtype="float32", device="cpu", max_num_seqs=2, **options)
        return llm.engine.scheduler.config.admission_hold_steps

    assert hold("qwen3_moe") == 1 and hold("llama") == 0
    assert hold("qwen3_moe", admission_hold_steps=0) == 0 and hold("llama", admission_hold_steps=2) == 2


def test_a_failing_step_fails_its_requests_and_the_engine_keeps_serving(tiny_model_dir, monkeypatch):
    from strata.config import EngineConfig, RunnerConfig

    engine = EngineCore(EngineConfig(model=tiny_model_dir("llama"), runner=RunnerConfig(device="cpu")), quiet=True)
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    real_forward = engine.runner.model.forward
    monkeypatch.setattr(engine.runner.model, "forward", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    engine.add_request(Request("doomed", [5, 6, 7], params))
    deltas = engine.step()
    assert deltas[0].finish_reason is FinishReason.ERROR and "boom" in deltas[0].error
    monkeypatch.setattr(engine.runner.model, "forward", real_forward)
    engine.add_request(Request("fine", [5, 6, 7], params))
    tokens = []
    while engine.has_unfinished():
        tokens += [t for d in engine.step() for t in d.new_token_ids]
    assert len(tokens) == 4


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_failing_step_leaves_no_checkpoint_it_was_to_save(tiny_model_dir, monkeypatch, async_scheduling):
    """A hybrid model's checkpoint save rides on the next step (planned ahead or not); if that step
    fails before it runs, the row holds anything, so its key must not be found by a later prefix match."""
    from strata.config import CacheConfig, EngineConfig, RunnerConfig, SchedulerConfig

    config = EngineConfig(model=tiny_model_dir("qwen3_next"), runner=RunnerConfig(device="cpu", dtype="float32"),
                          cache=CacheConfig(block_size=4),
                          scheduler=SchedulerConfig(async_scheduling=async_scheduling))
    engine = EngineCore(config, quiet=True)
    scheduler = engine.scheduler
    method = "launch_decode" if async_scheduling else "execute"
    real = getattr(engine.runner, method)
    doomed_keys = []

    def fail_when_saving(plan, *args):
        if plan.checkpoint_saves and any(s.num_computed_tokens > 9 for s in scheduler.running):  # decoding
            doomed_keys.append(scheduler.running[0].decode_checkpoint_key)
            raise RuntimeError("boom")
        return real(plan, *args)

    monkeypatch.setattr(engine.runner, method, fail_when_saving)
    engine.add_request(Request("doomed", list(range(5, 14)), SamplingParams(temperature=0.0, max_tokens=20,
                                                                            ignore_eos=True)))
    errors = []
    while engine.has_unfinished():
        errors += [d for d in engine.step() if d.finish_reason is FinishReason.ERROR]
    assert errors and doomed_keys[0] is not None
    assert not scheduler.checkpoints.contains(doomed_keys[0])


def test_a_kv_cache_dtype_we_do_not_have_or_a_pool_of_no_bytes_is_an_error():
    from strata.config import CacheConfig

    assert CacheConfig(kv_cache_dtype="auto").kv_cache_dtype == "auto"
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, fp8.*int8.*'int4'"):
        CacheConfig(kv_cache_dtype="int4")
    with pytest.raises(ValueError, match="kv_cache_mib must be at least 1"):
        CacheConfig(kv_cache_mib=0)


def test_without_max_model_len_a_cpu_run_sizes_its_context_from_the_kv_budget(tiny_model_dir, monkeypatch):
    """No --max-model-len on the CPU, a model whose maximum (512 here; 262K for Qwen3.5 / Qwen4-Exp) the KV budget
    cannot hold for one sequence: the engine starts with max_model_len what the pool holds (as on CUDA) instead of
    refusing; a prompt beyond it is refused with the limit named. An explicit --max-model-len past that budget gets a
    pool of one sequence at it; --kv-cache-mib sizes the pool (and the context) itself, and one larger than the RAM
    available is a clear error (test_memory_plan has one too small for --max-model-len). A model that fits keeps
    its maximum."""
    from strata.engine import memory_plan

    folder = tiny_model_dir("llama")
    roomy = LLM(folder, dtype="float32", device="cpu", max_num_seqs=2, block_size=4)
    assert roomy.engine.max_model_len == 512
    monkeypatch.setattr(memory_plan, "CPU_KV_BUDGET_BYTES", 30 * roomy.engine.memory.block_bytes)  # 30 blocks
    sized = LLM(folder, dtype="float32", device="cpu", max_num_seqs=2, block_size=4)
    assert sized.engine.max_model_len == 30 * 4
    out = sized.generate([{"prompt_token_ids": list(range(3, 60))}],
                         SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 8
    with pytest.raises(ValueError, match="max_model_len is 120"):
        sized.generate([{"prompt_token_ids": list(range(3, 130))}], SamplingParams(max_tokens=4))
    block_bytes = roomy.engine.memory.block_bytes
    explicit = LLM(folder, dtype="float32", device="cpu", max_num_seqs=2, block_size=4, max_model_len=512)
    assert explicit.engine.max_model_len == 512 and explicit.engine.num_kv_blocks == 512 // 4
    mib_blocks = 2**20 // block_bytes
    asked = LLM(folder, dtype="float32", device="cpu", max_num_seqs=2, block_size=4, kv_cache_mib=1)
    assert asked.engine.num_kv_blocks == min(mib_blocks, 2 * 512 // 4)
    assert asked.engine.max_model_len == min(512, mib_blocks * 4)
    monkeypatch.setattr(memory_plan, "host_available_bytes", lambda: 2**30)
    with pytest.raises(memory_plan.ModelDoesNotFit, match="--kv-cache-mib 2048 needs 2.00 GiB of RAM, only 1.00"):
        LLM(folder, dtype="float32", device="cpu", max_num_seqs=2, block_size=4, kv_cache_mib=2048)
