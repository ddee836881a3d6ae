"""Offline throughput: N seeded random prompts, greedy, fixed output length (EOS ignored), through
the engine's step loop with at most `concurrency` requests in flight; optionally HF transformers
`generate` on the same model and prompts, and our eager path against our CUDA-graph path, alternated
with our arm (A B A B …), medians reported. Each strata run also reports TTFT and token gaps, the
step-time split (forward / sample / draft / host) and, per decode step, the bytes the model must read
and the bandwidth that implies against a device copy timed in the same run (strata/bench/roofline.py).
Optionally prompt speed at given lengths (prefill.py) and one stream's decode at long contexts
(long_context.py)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from strata.bench.latency import DecodeExpertsMeter, latency_summary, run_closed_loop
from strata.bench.long_context import bench_decode_at_contexts
from strata.bench.prefill import bench_prefill
from strata.bench.roofline import ByteModel, count_params, decode_bandwidth, measure_copy_bandwidth
from strata.engine.llm import LLM
from strata.types import SamplingParams


def make_prompts(num_prompts: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    # skip the lowest ids: special tokens (EOS, BOS, chat markers) sit there in most vocabularies
    return torch.randint(100, vocab_size, (num_prompts, input_len), generator=gen).tolist()


_CODE = """def merge_intervals(intervals):
    intervals = sorted(intervals, key=lambda pair: pair[0])
    merged = [intervals[0]]
    for start, end in intervals[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
"""
_EDITS = ["rename `merged` to `result`", "rename `intervals` to `spans`", "rename `start` to `lo`",
          "rename the function to `merge_spans`", "rename `pair` to `item`", "rename `end` to `hi`",
          "rename `merged` to `out`", "rename `intervals` to `ranges`"]


def repetitive_prompts(llm: LLM, num_prompts: int) -> list[list[int]]:
    """Chat prompts asking to repeat a code snippet with a small edit: most of the answer copies
    the prompt, which is what suffix drafting is for (coding agents do this all day)."""
    return [llm.encode_chat([{"role": "user", "content": f"Repeat this Python code exactly, but "
                              f"{_EDITS[i % len(_EDITS)]}. Reply with the code only.\n\n```python\n{_CODE}```"}])
            for i in range(num_prompts)]


def run_strata(llm: LLM, prompts: list[list[int]], output_len: int, ignore_eos: bool = True,
               roofline: DecodeRoofline | None = None) -> dict:
    """One closed-loop run with the engine's slot count as concurrency: throughput, latencies, the
    step-time split and (with `roofline`) bytes per decode step and the bandwidth they imply."""
    core = llm.engine
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=ignore_eos)
    stats = core.scheduler.stats = type(core.scheduler.stats)()
    core.step_times = type(core.step_times)()
    core.scheduler.allocator.reset_prefix_cache()  # every run reads its prompts cold
    streams = min(len(prompts), core.scheduler.max_running)
    meter = DecodeExpertsMeter(core)
    runner = core.runner
    graph_steps = runner.graph_mixed_steps, runner.graph_part_steps
    requests, elapsed = run_closed_loop(core, prompts, params, streams, meter)
    tokens = sum(r.num_tokens for r in requests)
    step_times = core.step_times.as_dict()
    result = {"seconds": elapsed, "output_tokens": tokens, "output_tok_s": tokens / elapsed,
              "per_stream_tok_s": tokens / elapsed / streams, "steps": stats.num_steps,
              **latency_summary(requests), "step_seconds_total": step_times["all"]["wall_seconds"],
              "step_split_ms": {kind: _per_step_ms(totals) for kind, totals in step_times.items()},
              # steps of fresh prompts beside others replayed as one mixed graph, or as several graph parts
              "graph_steps": {"mixed": runner.graph_mixed_steps - graph_steps[0],
                              "parts": runner.graph_part_steps - graph_steps[1]}}
    if roofline is not None:
        result["roofline"] = decode_bandwidth(roofline.bytes, step_times["decode"], meter.mean,
                                              roofline.copy_bandwidth)
    if stats.num_verify_windows:
        result.update(mean_accepted_length=stats.mean_accepted_length,
                      mean_window_tokens=1.0 + stats.num_draft_tokens / stats.num_verify_windows,
                      acceptance_per_position=stats.acceptance_per_position())
    return result


def _speculation_bound(model: ByteModel, slots: int, spec: dict) -> dict:
    """{"byte_model_bound_vs_nospec": ...} for a spec arm whose runs verified windows (else {}): the gain the bytes
    alone predict for a random router (a trained one concentrates its choices), from the runs' median window
    length and tokens committed per window. No ceiling: plain steps read below a verification step's efficiency
    (session 34 measured 1.56x where it said 1.34x)."""
    windows = [(r["mean_window_tokens"], r["mean_accepted_length"]) for r in spec["runs"] if "mean_window_tokens" in r]
    if not windows:
        return {}
    window_tokens = statistics.median(w for w, _ in windows)
    committed = statistics.median(a for _, a in windows)
    return {"byte_model_bound_vs_nospec": model.speculation_bound(slots, window_tokens, committed)}


def _per_step_ms(totals: dict) -> dict:
    """A kind of step's count, its mean time by phase (ms) and its mean token rows and slots (busy slots, and how
    long their windows were: rows over slots)."""
    steps = totals["num_steps"]
    return {"num_steps": steps, **{phase: totals[f"{phase}_seconds"] * 1e3 / steps if steps else 0.0
                                   for phase in ("wall", "forward", "sample", "draft", "host")},
            "tokens_per_step": totals["tokens_per_step"], "slots_per_step": totals["slots_per_step"]}


def run_hf(model, prompts: list[list[int]], output_len: int, batch_size: int) -> dict:
    tokens, started = 0, time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        batch = torch.tensor(prompts[i:i + batch_size], device=model.device)  # equal lengths: no padding
        with torch.inference_mode():
            out = model.generate(batch, attention_mask=torch.ones_like(batch), do_sample=False,
                                 max_new_tokens=output_len, min_new_tokens=output_len, pad_token_id=0)
        tokens += (out.shape[1] - batch.shape[1]) * batch.shape[0]
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "output_tokens": tokens, "output_tok_s": tokens / elapsed}


_HF_MODEL_TYPES = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
                   "Qwen3NextForCausalLM": "qwen3_next"}


def load_hf_peer(model_spec: str, dtype: torch.dtype, device: str = "cpu"):
    """HF transformers on the engine's device: the same weights for a GGUF file or an HF folder; for
    random:<shape>, the same shape with HF's own random initialisation (a speed peer: routing is
    near-uniform in both), its experts through grouped_mm on CUDA."""
    import os

    from transformers import AutoConfig, AutoModelForCausalLM

    from strata.weights.random_source import RandomSource
    from strata.weights.source import BUNDLED_MODELS, bundled_model_path

    if model_spec.startswith("random:"):
        hf = dict(RandomSource(model_spec).hf_config)
        extra = {"experts_implementation": "grouped_mm"} if device.startswith("cuda") and hf.get("num_experts") else {}
        config = AutoConfig.for_model(_HF_MODEL_TYPES[hf.pop("architectures")[0]], **hf, **extra)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        return model.eval()
    path = bundled_model_path(model_spec) if model_spec in BUNDLED_MODELS else model_spec
    if path.endswith(".gguf"):
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                     dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device).eval()


@dataclass(frozen=True)
class OfflineOptions:
    model_spec: str
    num_prompts: int = 8
    input_len: int = 64
    output_len: int = 64
    concurrency: tuple[int, ...] = (1, 8)
    repeats: int = 3
    hf_peer: bool = False
    seed: int = 0
    workload: str = "random"
    eager_vs_graph: bool = False             # each strata arm twice: CUDA graphs off, then on
    prefill_lens: tuple[int, ...] = ()
    copy_mib: int | None = None              # device copy size (default: 2048 on CUDA, 256 on the CPU)
    # before the first measured run of each arm at each concurrency: one run of the same prompts with
    # this many output tokens, so kernels that step shapes of that concurrency need (Triton compiles a
    # variant at first use, up to ~1 s) are built outside the measurement; 0 turns it off
    warmup_output_len: int = 8
    sync_vs_async: bool = False              # each strata arm twice: --async-scheduling off, then on
    decode_contexts: tuple[int, ...] = ()    # one stream's decode after a prompt of each length


@dataclass(frozen=True)
class DecodeRoofline:
    bytes: ByteModel
    copy_bandwidth: float                    # bytes read + written per second, measured in this run


def bench_offline(llm: LLM, opts: OfflineOptions, no_spec: LLM | None = None) -> dict:
    """-> {"results": arms by name, "roofline": the device and model numbers, "prefill": …,
    "unavailable_arms": …} (the sections of the result document beside `results`)."""
    core = llm.engine
    if opts.workload == "repetitive":
        prompts, ignore_eos = repetitive_prompts(llm, opts.num_prompts), False
    else:
        prompts, ignore_eos = make_prompts(opts.num_prompts, opts.input_len, core.model_config.vocab_size,
                                           opts.seed), True
    engines = {"strata": llm} if no_spec is None else {"strata_spec": llm, "strata_nospec": no_spec}
    arms, unavailable = _arms(engines, opts.eager_vs_graph, opts.sync_vs_async)
    for _, engine, settings in arms:
        # at the largest concurrency: an engine built with fewer slots fails here, before any timing
        _apply(engine, {**settings, "max_num_seqs": max(opts.concurrency)})
        run_strata(engine, prompts[:1], 4)  # warm-up
    copy_mib = opts.copy_mib or (2048 if core.device.startswith("cuda") else 256)
    roofline = DecodeRoofline(ByteModel.from_model(core.loaded.model, core.model_config,
                                                   getattr(torch, core.dtype).itemsize),
                              measure_copy_bandwidth(core.device, copy_mib * 2**20))
    hf = load_hf_peer(opts.model_spec, getattr(torch, core.dtype), core.device) if opts.hf_peer else None
    runs: dict[str, list[dict]] = {}
    for repeat in range(opts.repeats):
        for c in opts.concurrency:
            for name, engine, settings in arms:
                _apply(engine, {**settings, "max_num_seqs": c})
                if repeat == 0 and opts.warmup_output_len:
                    run_strata(engine, prompts, opts.warmup_output_len, ignore_eos)
                runs.setdefault(f"{name}_c{c}", []).append(run_strata(engine, prompts, opts.output_len, ignore_eos,
                                                                      roofline))
            if hf is not None:
                runs.setdefault(f"hf_generate_b{c}", []).append(run_hf(hf, prompts, opts.output_len, c))
    summary = {name: summarise(arm_runs) for name, arm_runs in runs.items()}
    _add_ratios(summary, opts.concurrency, hf is not None, roofline.bytes)
    sections = {"results": summary, "roofline": {
        "device_copy_bandwidth_bytes_s": roofline.copy_bandwidth, "device_copy_bytes": copy_mib * 2**20,
        "model": {"params": count_params(core.model_config).as_dict(), "bytes": roofline.bytes.as_dict()}}}
    if opts.prefill_lens:
        vocab = core.model_config.vocab_size
        prompts = {n: make_prompts(1, n, vocab, opts.seed + n)[0] for n in opts.prefill_lens}
        sections["prefill"], gemm = bench_prefill(llm, opts.prefill_lens, opts.repeats, prompts)
        if gemm is not None:
            sections["roofline"]["bf16_gemm_flops"] = gemm
    if opts.decode_contexts:
        vocab = core.model_config.vocab_size
        prompts = {n: make_prompts(1, n, vocab, opts.seed + n)[0] for n in opts.decode_contexts}
        sections["long_context"] = bench_decode_at_contexts(llm, opts.decode_contexts, opts.output_len,
                                                            opts.repeats, prompts)
    if unavailable:
        sections["unavailable_arms"] = unavailable
    return sections


def _arms(engines: dict[str, LLM], eager_vs_graph: bool,
          sync_vs_async: bool = False) -> tuple[list[tuple[str, LLM, dict]], dict]:
    """(arm name, engine, settings to apply before each of its runs: "graphs" and/or "async"), and
    the arms that cannot run here with the reason. Each switch asked for doubles every engine's arms."""
    modes: list[tuple[str, dict]] = [("", {})]
    unavailable = {}
    if eager_vs_graph:
        if all(engine.engine.runner.graphs is not None for engine in engines.values()):
            modes = [(f"{suffix}_{mode}", {**settings, "graphs": mode == "graph"})
                     for suffix, settings in modes for mode in ("eager", "graph")]
        else:
            reason = ("the runner has no CUDA graphs (CPU, --no-cuda-graphs or a layer without a graph-safe "
                      "path); measured as configured instead")
            unavailable = {f"{name}_{mode}": reason for name in engines for mode in ("eager", "graph")}
    if sync_vs_async:
        modes = [(f"{suffix}_{mode}", {**settings, "async": mode == "async"})
                 for suffix, settings in modes for mode in ("sync", "async")]
    return [(f"{name}{suffix}", engine, settings) for name, engine in engines.items()
            for suffix, settings in modes], unavailable


def _apply(engine: LLM, settings: dict) -> None:
    """Settings absent from `settings` stay as they are (the engine was built with max_num_seqs at least
    the largest concurrency: see `strata bench offline`)."""
    engine.engine.set_runtime_options(cuda_graphs=settings.get("graphs"), async_scheduling=settings.get("async"),
                                      max_num_seqs=settings.get("max_num_seqs"))


_MEDIANS = {"median_ttft_p50_ms": ("ttft_ms", "p50"), "median_ttft_p95_ms": ("ttft_ms", "p95"),
            "median_token_gap_p95_ms": ("token_gap_ms", "p95"), "median_tpot_p50_ms": ("tpot_ms", "p50"),
            "median_decode_step_ms": ("roofline", "mean_decode_step_ms"),
            "median_achieved_bandwidth_bytes_s": ("roofline", "achieved_bandwidth_bytes_s"),
            "median_bandwidth_fraction": ("roofline", "bandwidth_fraction"),
            "median_experts_touched_per_layer": ("roofline", "experts_touched_per_layer")}


def summarise(runs: list[dict]) -> dict:
    entry = {"median_output_tok_s": statistics.median(r["output_tok_s"] for r in runs),
             "median_per_stream_tok_s": statistics.median(r.get("per_stream_tok_s", 0.0) for r in runs)}
    for key, (section, field) in _MEDIANS.items():
        values = [r[section][field] for r in runs if field in r.get(section, {})]
        if values:
            entry[key] = statistics.median(values)
    return {**entry, "runs": runs}


def _add_ratios(summary: dict, concurrency: tuple[int, ...], with_hf: bool, model: ByteModel | None = None) -> None:
    """Side-by-side ratios of arms measured in the same run: spec / no spec (beside the byte model's bound on it,
    ByteModel.speculation_bound, from the run's windows and acceptance), graph / eager, x / HF."""
    for c in concurrency:
        for mode in ("", "_eager", "_graph"):
            spec, base = summary.get(f"strata_spec{mode}_c{c}"), summary.get(f"strata_nospec{mode}_c{c}")
            if spec and base:
                spec["speedup_vs_nospec"] = spec["median_output_tok_s"] / base["median_output_tok_s"]
                if model is not None:
                    spec.update(_speculation_bound(model, c, spec))
        for engine in ("strata", "strata_spec", "strata_nospec"):
            eager, graph = summary.get(f"{engine}_eager_c{c}"), summary.get(f"{engine}_graph_c{c}")
            if eager and graph:
                graph["speedup_vs_eager"] = graph["median_output_tok_s"] / eager["median_output_tok_s"]
            for mode in ("", "_eager", "_graph"):
                sync, overlapped = summary.get(f"{engine}{mode}_sync_c{c}"), summary.get(f"{engine}{mode}_async_c{c}")
                if sync and overlapped:
                    overlapped["speedup_vs_sync"] = overlapped["median_output_tok_s"] / sync["median_output_tok_s"]
    base = summary.get("hf_generate_b1", {}).get("median_output_tok_s") if with_hf else None
    if base:
        for entry in summary.values():
            entry["ratio_vs_hf_single_stream"] = entry["median_output_tok_s"] / base
