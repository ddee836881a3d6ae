"""Prefix and conversation reuse: greedy output identical on a cache hit and on a cold run (every
family, checkpoints on the hybrid model, speculation on and off, shared prefixes in flight, a tiny
cache under pressure), and the allocator's invariants under random operations (hypothesis)."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strata import LLM, SamplingParams
from strata.cache.block_allocator import BlockAllocator, chain_hashes

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
SPECS = [None, {"method": "suffix", "num_speculative_tokens": 3}]


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def make_llm(folder: str, caching: bool, spec=None, device: str = "cpu", **kwargs) -> LLM:
    return LLM(folder, dtype="float32", device=device, max_num_seqs=4, block_size=4, max_num_batched_tokens=32,
               speculative_config=spec, enable_prefix_caching=caching, **kwargs)


def conversation(llm: LLM, document: list[int], questions: list[list[int]]) -> list:
    """Multi-turn: each turn's prompt is the previous prompt + answer + the next question."""
    outputs, prompt = [], list(document)
    for question in questions:
        prompt = prompt + question
        out = llm.generate({"prompt_token_ids": prompt}, GREEDY)[0]
        outputs.append(out)
        prompt = prompt + out.outputs[0].token_ids
    return outputs


@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "qwen3_next+mtp", "qwen3_5_moe+mtp", "qwen4_exp"])
@pytest.mark.parametrize("spec", SPECS, ids=["spec-off", "suffix"])
def test_follow_up_turns_reuse_the_conversation_and_match_a_cold_run(family, spec, tiny_model_dir):
    document, questions = tokens(70, 1), [tokens(5, 2), tokens(6, 3), tokens(4, 4)]
    warm = make_llm(tiny_model_dir(family), True, spec, checkpoint_every=16)
    cold = make_llm(tiny_model_dir(family), False, spec)
    warm_outs, cold_outs = conversation(warm, document, questions), conversation(cold, document, questions)
    assert [o.outputs[0].token_ids for o in warm_outs] == [o.outputs[0].token_ids for o in cold_outs]
    assert warm_outs[0].num_cached_tokens == 0 and cold_outs[1].num_cached_tokens == 0
    for previous, follow_up in zip(warm_outs, warm_outs[1:]):
        prior = len(previous.prompt_token_ids) + len(previous.outputs[0].token_ids)
        # attention-only models reuse every full block; the hybrid one up to its last checkpoint
        hybrid = family.endswith("+mtp") or family == "qwen4_exp"
        minimum = prior - 4 if not hybrid else len(previous.prompt_token_ids) - 4
        assert follow_up.num_cached_tokens >= minimum


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_concurrent_requests_sharing_a_prefix(family, tiny_model_dir):
    shared = tokens(40, 7)
    prompts = [{"prompt_token_ids": shared + tokens(3 + i, 10 + i)} for i in range(4)]
    warm = make_llm(tiny_model_dir(family), True, checkpoint_every=8)
    warm.generate(prompts[0], GREEDY)  # the shared part is now cached
    together = warm.generate(prompts, GREEDY)
    cold = make_llm(tiny_model_dir(family), False)
    assert [o.outputs[0].token_ids for o in together] == [o.outputs[0].token_ids for o in cold.generate(prompts, GREEDY)]
    assert all(o.num_cached_tokens >= 32 for o in together)
    allocator = warm.engine.scheduler.allocator
    assert allocator.num_free == allocator.num_blocks  # everything back (cached blocks are reusable)


def test_memory_pressure_only_lowers_the_hit_rate(tiny_model_dir):
    document, questions = tokens(60, 5), [tokens(4, 6), tokens(4, 7), tokens(4, 8)]
    tiny = make_llm(tiny_model_dir("qwen3_next"), True, num_gpu_blocks=40, max_model_len=160,
                    checkpoint_every=8, checkpoint_pool_size=1)
    roomy = make_llm(tiny_model_dir("qwen3_next"), False)
    assert [o.outputs[0].token_ids for o in conversation(tiny, document, questions)] == \
        [o.outputs[0].token_ids for o in conversation(roomy, document, questions)]


# ---- the allocator and prefix cache under random operations ------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.integers(2, 24), st.randoms(use_true_random=False))
def test_allocator_invariants(num_blocks, rng: random.Random):
    """Random allocate / register / free / lookup+take: counts never go negative, a held block is
    never handed out again, only unreferenced blocks are evicted, lookups match tokens exactly."""
    allocator = BlockAllocator(num_blocks)
    evicted = []
    allocator.on_evict = lambda block, h, toks: evicted.append(block)
    holders: list[list[int]] = []       # each holder: the blocks of one "request"
    contents: dict[int, tuple] = {}     # block -> tokens written while it was held
    for _ in range(120):
        op = rng.random()
        held = {b for h in holders for b in h}
        if op < 0.35:
            n = rng.randint(1, 3)
            if allocator.can_allocate(n):
                evicted.clear()
                got = allocator.allocate(n)
                assert not set(got) & held, "a held block was handed out again"
                assert not set(evicted) & held, "a held block was evicted"
                prefix = [rng.randint(0, 3) for _ in range(2 * n)]
                hashes = chain_hashes(prefix, 2, n)
                for block, h, i in zip(got, hashes, range(n)):
                    contents[block] = tuple(prefix[2 * i:2 * i + 2])
                    allocator.register(block, h, contents[block])
                holders.append(got)
        elif op < 0.7 and holders:
            allocator.free(holders.pop(rng.randrange(len(holders))))
        else:
            prefix = [rng.randint(0, 3) for _ in range(6)]
            found = allocator.lookup(chain_hashes(prefix, 2, 3), prefix, 2)
            for i, block in enumerate(found):
                assert contents[block] == tuple(prefix[2 * i:2 * i + 2])
            allocator.take(found)
            if found:
                holders.append(found)
        counts = {}
        for h in holders:
            for b in h:
                counts[b] = counts.get(b, 0) + 1
        for block in range(num_blocks):
            assert allocator.ref_count(block) == counts.get(block, 0) >= 0
        assert allocator.num_free == num_blocks - len(counts)


@pytest.mark.parametrize("family, device", [("llama", "cpu"), ("qwen3_next", "cpu"),
                                            pytest.param("qwen3_next", "cuda", marks=pytest.mark.gpu)])
def test_parked_conversations_come_back_from_host_ram(family, device, tiny_model_dir):
    """A device cache too small to keep conversation A while B runs: A's blocks (and checkpoints)
    are parked in host RAM and copied back for A's next turn, with output identical to a cold run.
    On CUDA the parks are queued on the stream (pinned memory) and the restores settle them first."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    doc_a, doc_b = tokens(60, 21), tokens(60, 22)
    question = tokens(5, 23)
    parked = make_llm(tiny_model_dir(family), True, num_gpu_blocks=40, max_model_len=160, checkpoint_every=8,
                      checkpoint_pool_size=2, conversation_cache_mib=1, device=device)
    cold = make_llm(tiny_model_dir(family), False, device=device)
    first = parked.generate({"prompt_token_ids": doc_a}, GREEDY)[0]
    parked.generate({"prompt_token_ids": doc_b}, GREEDY)  # evicts A from the device
    follow_up = doc_a + first.outputs[0].token_ids + question
    again = parked.generate({"prompt_token_ids": follow_up}, GREEDY)[0]
    assert again.outputs[0].token_ids == cold.generate({"prompt_token_ids": follow_up}, GREEDY)[0].outputs[0].token_ids
    stats = parked.engine.status()["cache"]
    assert stats["blocks_parked"] > 0 and stats["blocks_restored"] > 0 and again.num_cached_tokens >= 48
    if family == "qwen3_next":
        assert stats["checkpoints_parked"] > 0 and stats["checkpoints_restored"] > 0


def test_a_failed_restore_falls_back_to_recomputing(tiny_model_dir, monkeypatch):
    from strata.cache.pools import HostParkPool

    doc_a, doc_b, question = tokens(60, 31), tokens(60, 32), tokens(5, 33)
    llm = make_llm(tiny_model_dir("qwen3_next"), True, num_gpu_blocks=40, max_model_len=160, checkpoint_every=8,
                   checkpoint_pool_size=2, conversation_cache_mib=1)
    first = llm.generate({"prompt_token_ids": doc_a}, GREEDY)[0]
    llm.generate({"prompt_token_ids": doc_b}, GREEDY)
    real_restore, calls = HostParkPool.restore_blocks, {"n": 0}

    def failing_once(self, pairs):
        if pairs and calls["n"] == 0:
            calls["n"] += 1
            raise RuntimeError("simulated copy failure")
        real_restore(self, pairs)

    monkeypatch.setattr(HostParkPool, "restore_blocks", failing_once)
    follow_up = {"prompt_token_ids": doc_a + first.outputs[0].token_ids + question}
    again = llm.generate(follow_up, GREEDY)[0]
    cold = make_llm(tiny_model_dir("qwen3_next"), False).generate(follow_up, GREEDY)[0]
    assert calls["n"] == 1 and again.outputs[0].token_ids == cold.outputs[0].token_ids
    assert again.metrics["num_preemptions"] == 1  # it started over and read the prompt itself
    allocator = llm.engine.scheduler.allocator
    assert allocator.num_free == allocator.num_blocks


@pytest.mark.parametrize("seed", [1, 2])
def test_reuse_holds_whatever_draft_lengths_the_batch_gets(seed, tiny_model_dir, monkeypatch):
    """The cost model picks k from measured step times; any sequence of k must leave every full block
    of committed tokens registered (a window's accepted drafts are hashed after they are appended)."""
    from strata.spec import policy

    rng = random.Random(seed)
    monkeypatch.setattr(policy.DraftCostModel, "best_k",
                        lambda self, k_max, acceptances: rng.randint(0, k_max) if acceptances else None)
    test_follow_up_turns_reuse_the_conversation_and_match_a_cold_run("qwen3_moe", SPECS[1], tiny_model_dir)
