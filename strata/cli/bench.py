"""`strata bench offline | serve`: offline throughput of N seeded prompts, or latency and throughput of a
running server; one JSON result schema (see strata/bench/result.py)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from strata.cli.options import add_engine_options, engine_config
from strata.config import SpecConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks")
    modes = p.add_subparsers(dest="mode", required=True)
    off = modes.add_parser("offline", help="offline throughput of N seeded prompts")
    add_engine_options(off)
    off.add_argument("--num-prompts", type=int, default=8)
    off.add_argument("--input-len", type=int, default=64)
    off.add_argument("--output-len", type=int, default=64)
    off.add_argument("--concurrency", default="1,8", help="comma-separated slot counts to measure")
    off.add_argument("--repeats", type=int, default=3, help="alternated repetitions; medians reported")
    off.add_argument("--hf-peer", action="store_true", help="also measure HF transformers generate")
    off.add_argument("--workload", choices=("random", "repetitive"), default="random",
                     help="random token prompts (fixed output length), or chat prompts asking to repeat and "
                          "edit code (greedy until EOS or --output-len)")
    off.add_argument("--spec-baseline", action="store_true",
                     help="with --speculative-config: also measure the same engine without speculation")
    off.add_argument("--prompt-seed", type=int, default=0)
    off.add_argument("--output", default=None, help="write the JSON result here")
    off.set_defaults(run=run_offline)
    srv = modes.add_parser("serve", help="latency and throughput of a running server through the openai client")
    srv.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL")
    srv.add_argument("--api-key", default=None, help="the server's API key (default: $STRATA_API_KEY)")
    srv.add_argument("--num-prompts", type=int, default=32)
    srv.add_argument("--input-len", type=int, default=64)
    srv.add_argument("--output-len", type=int, default=64)
    srv.add_argument("--concurrency", default="8", help="comma-separated numbers of requests in flight")
    srv.add_argument("--prompt-seed", type=int, default=0)
    srv.add_argument("--output", default=None, help="write the JSON result here")
    srv.set_defaults(run=run_serve)
    multi = modes.add_parser("multiturn", help="U users x T turns over a shared document: reuse and TTFT")
    add_engine_options(multi)
    multi.add_argument("--users", type=int, default=16)
    multi.add_argument("--turns", type=int, default=3)
    multi.add_argument("--doc-len", type=int, default=8192, help="tokens in the shared document")
    multi.add_argument("--question-len", type=int, default=32)
    multi.add_argument("--output-len", type=int, default=64)
    multi.add_argument("--no-cold", action="store_true", help="skip the cold (prefix caching off) comparison")
    multi.add_argument("--prompt-seed", type=int, default=0)
    multi.add_argument("--output", default=None, help="write the JSON result here")
    multi.set_defaults(run=run_multiturn)


def run_offline(args: argparse.Namespace) -> int:
    import dataclasses

    from strata.bench.offline import bench_offline
    from strata.bench.result import write_result
    from strata.engine.llm import LLM

    concurrency = [int(c) for c in args.concurrency.split(",")]
    config = engine_config(args)
    config = dataclasses.replace(config, scheduler=dataclasses.replace(
        config.scheduler, max_num_seqs=max(concurrency + [config.scheduler.max_num_seqs])))
    llm = LLM.from_config(config, quiet=False)
    baseline = None
    if args.spec_baseline and config.speculative.enabled:
        baseline = LLM.from_config(dataclasses.replace(config, speculative=SpecConfig()), quiet=False)
    results = bench_offline(llm, args.model or "smollm2-135m", args.num_prompts, args.input_len,
                            args.output_len, concurrency, args.repeats, args.hf_peer, args.prompt_seed,
                            args.workload, baseline)
    bench_config = {"model": args.model or "smollm2-135m", "device": llm.engine.device, "dtype": llm.engine.dtype,
                    "num_prompts": args.num_prompts, "input_len": args.input_len, "output_len": args.output_len,
                    "concurrency": concurrency, "repeats": args.repeats, "workload": args.workload,
                    "speculative_config": dataclasses.asdict(config.speculative)}
    doc = write_result(args.output, "offline", "strata " + shlex.join(sys.argv[1:]), bench_config, results)
    for name, entry in doc["results"].items():
        ratio = entry.get("ratio_vs_hf_single_stream")
        print(f"{name:>20}: {entry['median_output_tok_s']:8.1f} tok/s"
              + (f"  ({ratio:.2f}x HF single stream)" if ratio else ""))
    if not args.output:
        print(json.dumps(doc["config"]))
    return 0


def run_serve(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from strata.bench.result import write_result
    from strata.bench.serve import bench_serve

    concurrency = [int(c) for c in args.concurrency.split(",")]
    api_key = args.api_key or os.environ.get("STRATA_API_KEY")
    url = args.url.rstrip("/")
    status, results = asyncio.run(bench_serve(url, api_key, args.num_prompts, args.input_len, args.output_len,
                                              concurrency, args.prompt_seed))
    bench_config = {"url": url, "model": status["model"], "device": status["engine"]["device"],
                    "dtype": status["engine"]["dtype"], "max_num_seqs": status["slots"]["total"],
                    "num_prompts": args.num_prompts, "input_len": args.input_len, "output_len": args.output_len,
                    "concurrency": concurrency}
    doc = write_result(args.output, "serve", "strata " + shlex.join(sys.argv[1:]), bench_config, results)
    for name, r in doc["results"].items():
        print(f"{name:>12}: {r['output_tok_s']:8.1f} tok/s  TTFT p50 {r['ttft_ms']['p50']:.0f} ms "
              f"p99 {r['ttft_ms']['p99']:.0f} ms  TPOT p50 {r['tpot_ms'].get('p50', 0):.0f} ms  "
              f"ITL p50 {r['itl_ms'].get('p50', 0):.0f} ms  E2E p50 {r['e2e_ms']['p50']:.0f} ms")
    if not args.output:
        print(json.dumps(doc["config"]))
    return 0


def run_multiturn(args: argparse.Namespace) -> int:
    import dataclasses

    from strata.bench.multiturn import bench_multiturn
    from strata.bench.result import write_result
    from strata.engine.core import EngineCore

    config = engine_config(args)
    core = EngineCore(config, quiet=False)
    results = bench_multiturn(core, not args.no_cold, args.users, args.turns, args.doc_len, args.question_len,
                              args.output_len, args.prompt_seed)
    bench_config = {"model": args.model or "smollm2-135m", "device": core.device, "dtype": core.dtype,
                    "users": args.users, "turns": args.turns, "doc_len": args.doc_len,
                    "question_len": args.question_len, "output_len": args.output_len,
                    "cache": dataclasses.asdict(config.cache)}
    doc = write_result(args.output, "multiturn", "strata " + shlex.join(sys.argv[1:]), bench_config, results)
    print(json.dumps(doc["results"], indent=2))
    return 0
