"""Multi-turn reuse: U users each hold a T-turn conversation over one shared D-token document; every
turn resends the whole conversation, as chat clients and coding agents do. Reports first-turn and
follow-up TTFT (p50/p95), the share of follow-up prompt tokens served from the cache, aggregate
output tok/s, and the TTFT of the last turn's prompts read cold (prefix caching off)."""

from __future__ import annotations

import statistics
import time

import torch

from strata.engine.core import EngineCore
from strata.types import Request, SamplingParams


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else 0.0


def run_turn(core: EngineCore, prompts: dict[str, list[int]], output_len: int) -> tuple[dict, dict, dict, float]:
    """All users' requests of one turn together -> (ttft per user, output ids, cached tokens, seconds)."""
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    started = time.perf_counter()
    for user, prompt in prompts.items():
        core.add_request(Request(user, prompt, params))
    ttft, outputs, cached = {}, {user: [] for user in prompts}, {}
    while core.has_unfinished():
        for delta in core.step():
            if delta.new_token_ids and delta.request_id not in ttft:
                ttft[delta.request_id] = time.perf_counter() - started
            outputs[delta.request_id] += delta.new_token_ids
            if delta.finished:
                cached[delta.request_id] = delta.num_cached_tokens
    return ttft, outputs, cached, time.perf_counter() - started


def bench_multiturn(core: EngineCore, measure_cold: bool, users: int, turns: int, doc_len: int,
                    question_len: int, output_len: int, seed: int) -> dict:
    vocab = core.model_config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    document = torch.randint(100, vocab, (doc_len,), generator=gen).tolist()
    prompts = {f"user{u}": list(document) for u in range(users)}
    first_ttft, follow_ttft, reused, follow_tokens, out_tokens, seconds = [], [], 0, 0, 0, 0.0
    last_prompts = {}
    for turn in range(turns):
        for user in prompts:
            prompts[user] = prompts[user] + torch.randint(100, vocab, (question_len,), generator=gen).tolist()
        ttft, outputs, cached, elapsed = run_turn(core, prompts, output_len)
        seconds += elapsed
        out_tokens += sum(len(o) for o in outputs.values())
        if turn == 0:
            first_ttft += ttft.values()
        else:
            follow_ttft += ttft.values()
            reused += sum(cached.values())
            follow_tokens += sum(len(p) for p in prompts.values())
        last_prompts = dict(prompts)
        for user in prompts:
            prompts[user] = prompts[user] + outputs[user]
    result = {
        "first_turn_ttft_p50": percentile(first_ttft, 0.5), "first_turn_ttft_p95": percentile(first_ttft, 0.95),
        "follow_up_ttft_p50": percentile(follow_ttft, 0.5), "follow_up_ttft_p95": percentile(follow_ttft, 0.95),
        "follow_up_prompt_tokens_reused": reused / follow_tokens if follow_tokens else 0.0,
        "aggregate_output_tok_s": out_tokens / seconds, "cache": core.status()["cache"],
    }
    if measure_cold and turns > 1:
        # the last turn's prompts again on the same engine with the prefix cache off and emptied
        # (one model in memory: a second engine would not fit beside a large one)
        allocator = core.scheduler.allocator
        allocator.reset_prefix_cache()
        allocator.enable_prefix_caching = False
        cold_ttft, *_ = run_turn(core, {f"cold-{u}": p for u, p in last_prompts.items()}, output_len)
        allocator.enable_prefix_caching = True
        result["cold_ttft_p50"] = statistics.median(cold_ttft.values())
        result["follow_up_ttft_vs_cold"] = result["follow_up_ttft_p50"] / result["cold_ttft_p50"]
    return result
