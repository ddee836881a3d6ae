"""Serving benchmark, like `vllm bench serve`: N seeded random-token prompts sent to a running server
through the official `openai` client (streaming /v1/completions, EOS ignored, fixed output length) with
at most `concurrency` in flight. Reports TTFT, TPOT, ITL and E2E (mean, p50/p95/p99, ms) and the
aggregate output tok/s. A progress bar counts finished requests on a terminal."""

from __future__ import annotations

import asyncio
import random
import time

from strata.bench.result import percentiles


def make_prompts(num_prompts: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    # skip the lowest ids: special tokens sit there in most vocabularies
    return [[rng.randrange(100, vocab_size) for _ in range(input_len)] for _ in range(num_prompts)]


async def _one(client, model: str, prompt: list[int], output_len: int) -> dict:
    started = time.perf_counter()
    chunk_times, num_tokens = [], 0
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=output_len, temperature=0,
                                             stream=True, stream_options={"include_usage": True},
                                             extra_body={"ignore_eos": True})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            chunk_times.append(time.perf_counter())
        if chunk.usage is not None:
            num_tokens = chunk.usage.completion_tokens
    ended = time.perf_counter()
    ttft = chunk_times[0] - started if chunk_times else ended - started
    return {"ttft": ttft, "e2e": ended - started, "output_tokens": num_tokens,
            "tpot": (ended - started - ttft) / (num_tokens - 1) if num_tokens > 1 else None,
            "itl": [b - a for a, b in zip(chunk_times, chunk_times[1:])]}


async def run_level(client, model: str, prompts: list[list[int]], output_len: int, concurrency: int,
                    on_done=None) -> dict:
    """`on_done()` is called as each request finishes (a progress bar)."""
    gate = asyncio.Semaphore(concurrency)

    async def limited(prompt):
        async with gate:
            run = await _one(client, model, prompt, output_len)
        if on_done is not None:
            on_done()
        return run

    started = time.perf_counter()
    runs = await asyncio.gather(*(limited(p) for p in prompts))
    duration = time.perf_counter() - started
    tokens = sum(r["output_tokens"] for r in runs)
    ms = lambda xs: {k: v * 1000 for k, v in percentiles(xs).items()}  # noqa: E731
    return {"concurrency": concurrency, "num_requests": len(runs), "duration_s": duration, "output_tokens": tokens,
            "output_tok_s": tokens / duration, "request_throughput": len(runs) / duration,
            "ttft_ms": ms([r["ttft"] for r in runs]), "tpot_ms": ms([r["tpot"] for r in runs if r["tpot"] is not None]),
            "itl_ms": ms([x for r in runs for x in r["itl"]]), "e2e_ms": ms([r["e2e"] for r in runs])}


async def bench_serve(url: str, api_key: str | None, num_prompts: int, input_len: int, output_len: int,
                      concurrency: list[int], seed: int) -> tuple[dict, dict]:
    import httpx
    import openai

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    status = httpx.get(url + "/v1/status", headers=headers, timeout=10).raise_for_status().json()
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=api_key or "none", max_retries=0, timeout=None)
    model = status["model"]
    prompts = make_prompts(num_prompts, input_len, status["vocab_size"], seed)
    with request_progress() as bar:
        task = bar.add_task("warm-up", total=1)
        advance = lambda: bar.advance(task)  # noqa: E731
        await run_level(client, model, prompts[:1], 4, 1, advance)
        results = {}
        for c in concurrency:
            bar.update(task, description=f"concurrency {c}", total=len(prompts), completed=0)
            results[f"serve_c{c}"] = await run_level(client, model, prompts, output_len, c, advance)
    return status, results


def request_progress():
    """A transient bar of finished requests on stderr (drawn only on a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)
