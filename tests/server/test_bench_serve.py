"""`strata bench serve` against a live server with a stand-in engine: every request is measured at each
concurrency (the progress bar counts them as they finish) and the result holds the latency percentiles."""

from __future__ import annotations

import asyncio

from live_server import API_KEY, fake_app, thread_server
from strata.bench.serve import bench_serve


def test_bench_serve_measures_every_request():
    with thread_server(fake_app("echo")) as srv:
        status, results = asyncio.run(bench_serve(srv.base_url, API_KEY, num_prompts=6, input_len=8, output_len=2,
                                                  concurrency=[1, 3], seed=0))
    assert status["model"] == "smollm2-135m"
    assert sorted(results) == ["serve_c1", "serve_c3"]
    for level in results.values():
        assert level["num_requests"] == 6 and level["output_tokens"] == 12
        assert set(level["ttft_ms"]) == {"mean", "p50", "p95", "p99"}
