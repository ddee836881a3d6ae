"""`strata bench offline`: throughput of N seeded prompts, JSON result (see strata/bench/result.py)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from strata.cli.options import add_engine_options, engine_config


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
    off.add_argument("--prompt-seed", type=int, default=0)
    off.add_argument("--output", default=None, help="write the JSON result here")
    off.set_defaults(run=run_offline)


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
    results = bench_offline(llm, args.model or "smollm2-135m", args.num_prompts, args.input_len,
                            args.output_len, concurrency, args.repeats, args.hf_peer, args.prompt_seed)
    bench_config = {"model": args.model or "smollm2-135m", "device": llm.engine.device, "dtype": llm.engine.dtype,
                    "num_prompts": args.num_prompts, "input_len": args.input_len, "output_len": args.output_len,
                    "concurrency": concurrency, "repeats": args.repeats}
    doc = write_result(args.output, "offline", "strata " + shlex.join(sys.argv[1:]), bench_config, results)
    for name, entry in doc["results"].items():
        ratio = entry.get("ratio_vs_hf_single_stream")
        print(f"{name:>20}: {entry['median_output_tok_s']:8.1f} tok/s"
              + (f"  ({ratio:.2f}x HF single stream)" if ratio else ""))
    if not args.output:
        print(json.dumps(doc["config"]))
    return 0
