"""`strata bench offline | serve | soak | multiturn | experts | perplexity | plot | kernels`: offline throughput
of N seeded prompts, latency and throughput of a running server, a soak of a server under disconnects and engine
kills, perplexity on a text, …; one JSON result schema (see strata/bench/result.py).
`kernels` (Triton kernel microbenchmarks, strata/bench/kernels.py) writes its own rows and needs CUDA."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from strata.cli.options import add_engine_options, engine_config
from strata.config import SpecConfig

KERNEL_FAMILIES = ("moe", "linear", "packed", "attention", "gdn")


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
    off.add_argument("--eager-vs-graph", action="store_true",
                     help="measure every strata arm twice per repeat, CUDA graphs off then on (alternated)")
    off.add_argument("--sync-vs-async", action="store_true",
                     help="measure every strata arm twice per repeat, --async-scheduling off then on (alternated)")
    off.add_argument("--prefill-lens", default="",
                     help="comma-separated prompt lengths: also time prompt processing (max_tokens=1) at each")
    off.add_argument("--decode-contexts", default="",
                     help="comma-separated context lengths: also time one stream's decode (--output-len tokens, median "
                          "gap between tokens) after a prompt of each length")
    off.add_argument("--warmup-output-len", type=int, default=8,
                     help="output tokens of the unmeasured run of each arm before its first run at each "
                          "concurrency (builds the kernels those step shapes need); 0: none")
    off.add_argument("--copy-mib", type=int, default=None,
                     help="size of the device copy that measures bandwidth (default: 2048 on CUDA, 256 on the CPU)")
    off.add_argument("--prompt-seed", type=int, default=0)
    off.add_argument("--output", default=None, help="write the JSON result here")
    off.add_argument("--plot", default=None, metavar="FILE.png",
                     help="also write a PNG: tok/s and bandwidth fraction against concurrency (needs matplotlib)")
    off.set_defaults(run=run_offline)
    plot = modes.add_parser("plot", help="draw the PNG of an offline result JSON (e.g. one made where "
                                         "matplotlib is missing)")
    plot.add_argument("result", help="a `strata bench offline --output` JSON file")
    plot.add_argument("--output", required=True, metavar="FILE.png")
    plot.set_defaults(run=run_plot)
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
    soak = modes.add_parser("soak", help="start `strata serve` and soak it: N mixed requests at a concurrency, "
                                         "client disconnects and engine kills; counts outcomes and leaks")
    soak.add_argument("model", nargs="?", default="", help="the model to serve (default: the bundled one)")
    soak.add_argument("--serve-args", default="--device cpu --max-num-seqs 16",
                      help="more `strata serve` options, one string")
    soak.add_argument("--num-requests", type=int, default=1000)
    soak.add_argument("--concurrency", type=int, default=32)
    soak.add_argument("--disconnect-fraction", type=float, default=0.2, help="streams the client leaves mid-way")
    soak.add_argument("--engine-kills", type=int, default=5, help="engine SIGKILLs at even intervals")
    soak.add_argument("--max-tokens", type=int, default=8, help="each request asks for 1..this many tokens")
    soak.add_argument("--request-timeout-s", type=float, default=300.0, help="a request past this is a hang")
    soak.add_argument("--seed", type=int, default=0)
    soak.add_argument("--output", default=None, help="write the JSON result here")
    soak.set_defaults(run=run_soak)
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
    exp = modes.add_parser("experts", help="sweep the expert cache size: decode speed and hit rate, learned hot "
                                           "set against a static split")
    add_engine_options(exp)
    exp.add_argument("--cache-sizes", default="10%,25%,50%,100%", help="comma-separated --expert-cache values")
    exp.add_argument("--placements", default="learned,static", help="learned and/or static")
    exp.add_argument("--num-prompts", type=int, default=4)
    exp.add_argument("--input-len", type=int, default=64)
    exp.add_argument("--output-len", type=int, default=64)
    exp.add_argument("--swap-interval", type=int, default=32, help="learned placement: steps between hot-set updates")
    exp.add_argument("--prompt-seed", type=int, default=0)
    exp.add_argument("--output", default=None, help="write the JSON result here")
    exp.set_defaults(run=run_experts)
    ppl = modes.add_parser("perplexity", help="perplexity on a text file, as llama-perplexity measures it (compare a "
                                              "model's quantized files)")
    add_engine_options(ppl)
    ppl.add_argument("--text", required=True, metavar="FILE", help="a UTF-8 text file (e.g. wikitext-2's test split)")
    ppl.add_argument("--context", type=int, default=512, help="tokens a window (each scored apart)")
    ppl.add_argument("--score-all", action="store_true",
                     help="score every token of a window after its first, not only its second half")
    ppl.add_argument("--max-windows", type=int, default=None, help="score only the text's first N windows")
    ppl.add_argument("--output", default=None, help="write the JSON result here")
    ppl.set_defaults(run=run_perplexity)
    kern = modes.add_parser("kernels", help="Triton kernels at decode/verify shapes: bandwidth against a device "
                                            "copy (needs CUDA and Triton)")
    kern.add_argument("--out", help="write all rows as JSON here")
    kern.add_argument("--no-sweep", action="store_true", help="default tile configs only")
    kern.add_argument("--only", default=",".join(KERNEL_FAMILIES),
                      help=f"comma-separated kernel families to run ({', '.join(KERNEL_FAMILIES)})")
    kern.set_defaults(run=run_kernels)


def run_offline(args: argparse.Namespace) -> int:
    import dataclasses

    from strata.bench.offline import OfflineOptions, bench_offline
    from strata.bench.plot import write_plot
    from strata.bench.result import write_result
    from strata.engine.llm import LLM

    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    prefill_lens = tuple(int(n) for n in args.prefill_lens.split(",") if n)
    decode_contexts = tuple(int(n) for n in args.decode_contexts.split(",") if n)
    config = engine_config(args)
    config = dataclasses.replace(config, scheduler=dataclasses.replace(
        config.scheduler, max_num_seqs=max(concurrency + (config.scheduler.max_num_seqs,))))
    llm = LLM.from_config(config, quiet=False)
    for flag, lengths, extra in (("--prefill-lens", prefill_lens, 1), ("--decode-contexts", decode_contexts,
                                                                          args.output_len)):
        if lengths and max(lengths) + extra > llm.engine.max_model_len:
            raise ValueError(f"{flag} {max(lengths)} needs max_model_len of at least {max(lengths) + extra} "
                             f"(it is {llm.engine.max_model_len}); pass --max-model-len {max(lengths) + extra} "
                             f"or shorter lengths")
    baseline = None
    if args.spec_baseline and config.speculative.enabled:
        # the same weights: two copies of a large model would not fit beside each other
        baseline = LLM.from_config(dataclasses.replace(config, speculative=SpecConfig()), quiet=False,
                                   share_model_of=llm)
    model = args.model or "smollm2-135m"
    opts = OfflineOptions(model, args.num_prompts, args.input_len, args.output_len, concurrency, args.repeats,
                          args.hf_peer, args.prompt_seed, args.workload, args.eager_vs_graph, prefill_lens,
                          args.copy_mib, args.warmup_output_len, sync_vs_async=args.sync_vs_async,
                          decode_contexts=decode_contexts)
    try:
        sections = bench_offline(llm, opts, baseline)
    finally:
        llm.close()  # a pipeline split's other stages end with it
    bench_config = {"model": model, "device": llm.engine.device, "dtype": llm.engine.dtype,
                    "num_prompts": args.num_prompts, "input_len": args.input_len, "output_len": args.output_len,
                    "concurrency": list(concurrency), "repeats": args.repeats, "workload": args.workload,
                    "eager_vs_graph": args.eager_vs_graph, "sync_vs_async": args.sync_vs_async,
                    "prefill_lens": list(prefill_lens), "decode_contexts": list(decode_contexts),
                    "warmup_output_len": args.warmup_output_len,
                    "speculative_config": dataclasses.asdict(config.speculative)}
    doc = write_result(args.output, "offline", "strata " + shlex.join(sys.argv[1:]), bench_config, **sections)
    _print_offline(doc)
    if args.plot:
        print(write_plot(doc, args.plot))
    if not args.output:
        print(json.dumps(doc["config"]))
    return 0


def _print_offline(doc: dict) -> None:
    for name, entry in doc["results"].items():
        ratio = entry.get("ratio_vs_hf_single_stream")
        line = f"{name:>20}: {entry['median_output_tok_s']:8.1f} tok/s"
        if "median_ttft_p50_ms" in entry:
            line += (f"  TTFT p50 {entry['median_ttft_p50_ms']:.0f} ms p95 {entry['median_ttft_p95_ms']:.0f} ms"
                     f"  gap p95 {entry.get('median_token_gap_p95_ms', 0):.1f} ms")
        if entry.get("median_tpot_p50_ms"):  # a stream's decode rate, its prompt's time left out (llama-bench's tg)
            line += f"  decode {1e3 / entry['median_tpot_p50_ms']:.0f} tok/s a stream"
        if "median_bandwidth_fraction" in entry:
            line += f"  {entry['median_bandwidth_fraction']:.0%} of copy bandwidth"
        if "speedup_vs_nospec" in entry:
            line += f"  {entry['speedup_vs_nospec']:.2f}x no spec"
            if "byte_model_bound_vs_nospec" in entry:
                # (bytes alone: plain steps read below a verification step's efficiency, so it is no ceiling)
                line += f" (byte model, random router: {entry['byte_model_bound_vs_nospec']:.2f}x)"
        print(line + (f"  ({ratio:.2f}x HF single stream)" if ratio else ""))
    for name, entry in doc.get("prefill", {}).items():
        peak = entry.get("gemm_peak_fraction")
        print(f"{name:>20}: {entry['median_prefill_tok_s']:8.1f} prompt tok/s"
              + (f"  ({peak:.0%} of bf16 GEMM peak)" if peak is not None else ""))
    for name, entry in doc.get("long_context", {}).items():
        print(f"{name:>20}: {entry['median_decode_tok_s']:8.1f} decode tok/s (one stream, "
              f"{entry['ratio_vs_shortest']:.2f}x the shortest context)  TTFT {entry['median_ttft_ms']:.0f} ms")
    for name, reason in doc.get("unavailable_arms", {}).items():
        print(f"{name:>20}: unavailable ({reason})")


def run_plot(args: argparse.Namespace) -> int:
    from strata.bench.plot import write_plot

    with open(args.result) as f:
        doc = json.load(f)
    if doc.get("bench") != "offline":
        raise ValueError(f"{args.result} is a {doc.get('bench')!r} result; `strata bench plot` draws offline results")
    message = write_plot(doc, args.output)
    print(message)
    return 0 if message.startswith("plot written") else 1


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


def run_soak(args: argparse.Namespace) -> int:
    from strata.bench.result import write_result
    from strata.bench.soak import run_soak as soak

    result = soak(args.model, shlex.split(args.serve_args), args.num_requests, args.concurrency,
                  args.disconnect_fraction, args.engine_kills, args.max_tokens, args.seed, args.request_timeout_s)
    doc = write_result(args.output, "soak", "strata " + shlex.join(sys.argv[1:]), result.pop("config"),
                       {"soak": result})
    leaks = {k: v for k, v in result["leaks"].items() if k != "engine"}
    print(f"soak: {args.num_requests} requests in {result['duration_s']:.0f} s: {result['outcomes']}; "
          f"restart to health {['%.2f' % s for s in result['restart_to_health_s']]} s; leaks {leaks}; "
          f"shutdown exit {result['shutdown_exit_code']} in {result['shutdown_s']:.1f} s; "
          f"tracebacks in the log: {result['tracebacks_in_log']}")
    if not args.output:
        print(json.dumps(doc["config"]))
    clean = not result["failures"] and not any(leaks.values()) and not result["tracebacks_in_log"]
    return 0 if clean else 1


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


def run_experts(args: argparse.Namespace) -> int:
    from strata.bench.experts import bench_experts
    from strata.bench.result import write_result

    config = engine_config(args)
    sizes = [s for s in args.cache_sizes.split(",") if s]
    placements = [p for p in args.placements.split(",") if p]
    results = bench_experts(config, sizes, placements, args.num_prompts, args.input_len, args.output_len,
                            args.prompt_seed, args.swap_interval)
    bench_config = {"model": args.model, "cache_sizes": sizes, "placements": placements,
                    "num_prompts": args.num_prompts, "input_len": args.input_len, "output_len": args.output_len,
                    "max_num_seqs": config.scheduler.max_num_seqs, "cpu_threads": config.experts.cpu_threads,
                    "pcie_frac": config.experts.pcie_frac}
    doc = write_result(args.output, "experts", "strata " + shlex.join(sys.argv[1:]), bench_config, results)
    for name, entry in doc["results"].items():
        shares = entry["experts"]
        decode = entry.get("decode_tok_s")
        print(f"{name:>16}: {entry['output_tok_s']:8.1f} tok/s (decode {decode or 0:.1f}/stream)  "
              f"gpu {shares.get('gpu_hit_rate', 1.0):.0%}  "
              f"cpu {shares.get('cpu_share', 0.0):.0%}  pcie {shares.get('pcie_share', 0.0):.0%}  "
              f"swaps {shares.get('swaps', 0)}")
    return 0


def run_perplexity(args: argparse.Namespace) -> int:
    from strata.bench.perplexity import bench_perplexity, text_windows
    from strata.bench.result import write_result
    from strata.engine.llm import LLM

    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    with LLM.from_config(engine_config(args), quiet=False) as llm:
        tokenizer = llm.tokenizer
        if tokenizer is None:
            raise ValueError("this model has no tokenizer to read --text with")
        adds_bos = tokenizer.bos_token_id is not None and tokenizer.encode("a")[:1] == [tokenizer.bos_token_id]
        windows = text_windows(tokenizer.encode(text, add_special_tokens=False), args.context,
                               tokenizer.bos_token_id if adds_bos else None, args.max_windows)
        first_scored = 1 if args.score_all else args.context // 2
        results = bench_perplexity(llm, windows, first_scored)
        bench_config = {"model": args.model or "smollm2-135m", "device": llm.engine.device, "dtype": llm.engine.dtype,
                        "text": args.text, "context": args.context, "first_scored": first_scored, "bos": adds_bos}
    write_result(args.output, "perplexity", "strata " + shlex.join(sys.argv[1:]), bench_config, results)
    print(f"perplexity {results['perplexity']:.4f} +/- {results['perplexity_stderr']:.4f} over "
          f"{results['scored_tokens']} tokens in {results['windows']} windows of {args.context} "
          f"({results['prompt_tok_s']:.0f} prompt tok/s)")
    return 0


def run_kernels(args: argparse.Namespace) -> int:
    only = set(args.only.split(","))
    if not only <= set(KERNEL_FAMILIES):
        raise ValueError(f"--only: unknown kernel families {sorted(only - set(KERNEL_FAMILIES))}; pass a "
                         f"comma-separated subset of {', '.join(KERNEL_FAMILIES)}")
    reason = kernels_unavailable_reason()
    if reason is not None:
        print(f"strata: error: strata bench kernels needs CUDA and Triton: {reason}", file=sys.stderr)
        return 2
    from strata.bench.kernels import run

    run(only, not args.no_sweep, args.out)
    return 0


def kernels_unavailable_reason() -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed (pip install triton, on a machine with an NVIDIA GPU)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device is visible to torch"
    return None
