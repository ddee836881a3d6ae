"""Decode at long context: one stream after a seeded random prompt of each length (prefix cache emptied
first), lengths alternated within each repeat, medians reported. The figure of merit is the median gap
between consecutive tokens once the prompt is in, so neither the prompt's cost nor a rare slow step (a
kernel built at first use, the host scheduling stalls seen on the H200) moves it; the mean gap (`tpot`)
and TTFT are reported beside it. Where the KV of the older tokens lives (device, the
host tier of --kv-resident-tokens) and its dtype (--kv-cache-dtype) are the engine's settings."""

from __future__ import annotations

import statistics

from strata.bench.latency import latency_summary, run_closed_loop
from strata.engine.llm import LLM
from strata.types import SamplingParams


def bench_decode_at_contexts(llm: LLM, lengths: tuple[int, ...], output_len: int, repeats: int,
                             prompts: dict[int, list[int]]) -> dict:
    """`prompts`: length -> prompt token ids. -> {"decode_at_<n>": {median tpot, decode tok/s, TTFT, runs}}."""
    core = llm.engine
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    runs: dict[int, list[dict]] = {n: [] for n in lengths}
    for _ in range(repeats):
        for n in lengths:
            core.scheduler.allocator.reset_prefix_cache()
            requests, _ = run_closed_loop(core, [prompts[n]], params, 1)
            latency = latency_summary(requests)
            runs[n].append({"token_gap_p50_ms": latency["token_gap_ms"]["p50"], "tpot_ms": latency["tpot_ms"]["p50"],
                            "ttft_ms": latency["ttft_ms"]["p50"]})
    results = {}
    for n, entries in runs.items():
        gap = statistics.median(r["token_gap_p50_ms"] for r in entries)
        results[f"decode_at_{n}"] = {"context_tokens": n, "output_tokens": output_len,
                                     "median_token_gap_ms": gap, "median_decode_tok_s": 1e3 / gap,
                                     "median_tpot_ms": statistics.median(r["tpot_ms"] for r in entries),
                                     "median_ttft_ms": statistics.median(r["ttft_ms"] for r in entries),
                                     "runs": entries}
    shortest = results[f"decode_at_{min(lengths)}"]["median_decode_tok_s"]
    for entry in results.values():
        entry["ratio_vs_shortest"] = entry["median_decode_tok_s"] / shortest
    return results
