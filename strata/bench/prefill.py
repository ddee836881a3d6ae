"""Prompt processing speed: one seeded random prompt of each length read with max_tokens=1 and the
prefix cache emptied, lengths alternated within each repeat, medians reported. On CUDA the rate is also
put against a large bf16 matmul timed in the same run, counting 2 x active parameters flops per token
(attention's own flops are left out, so long prompts read a little low)."""

from __future__ import annotations

import statistics
import time

from strata.bench.roofline import count_params, measure_matmul_flops
from strata.engine.llm import LLM
from strata.types import SamplingParams


def bench_prefill(llm: LLM, lengths: tuple[int, ...], repeats: int,
                  prompts: dict[int, list[int]]) -> tuple[dict, float | None]:
    """`prompts`: length -> prompt token ids. -> (prefill_<n> entries, bf16 GEMM flop/s or None off CUDA)."""
    core = llm.engine
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    # one warm-up prompt of each length: a length's first prompt compiles or plans what its shapes need (session 38:
    # a Qwen3-Next Q4_K_M 512-token prompt took 0.26-0.52 s the first time after a 128-token warm-up, 21 ms after)
    for n in lengths:
        core.scheduler.allocator.reset_prefix_cache()
        llm.generate([{"prompt_token_ids": prompts[n]}], params)
    seconds: dict[int, list[float]] = {n: [] for n in lengths}
    for _ in range(repeats):
        for n in lengths:
            core.scheduler.allocator.reset_prefix_cache()
            started = time.perf_counter()
            llm.generate([{"prompt_token_ids": prompts[n]}], params)
            seconds[n].append(time.perf_counter() - started)
    gemm = measure_matmul_flops(core.device) if core.device.startswith("cuda") else None
    flops_per_token = 2 * count_params(core.model_config).active
    results = {}
    for n, times in seconds.items():
        median = statistics.median(times)
        entry = {"prompt_tokens": n, "median_seconds": median, "median_prefill_tok_s": n / median,
                 "runs_seconds": times, "flops_per_token": flops_per_token}
        if gemm:
            entry["gemm_peak_fraction"] = flops_per_token * n / median / gemm
        results[f"prefill_{n}"] = entry
    return results, gemm
