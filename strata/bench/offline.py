"""Offline throughput: N seeded random prompts, greedy, fixed output length (EOS ignored), through
the engine with `concurrency` slots; optionally HF transformers `generate` on the same model and
prompts, single stream and padded batch, alternated with our arm (A B A B …), medians reported."""

from __future__ import annotations

import statistics
import time

import torch

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


def run_strata(llm: LLM, prompts: list[list[int]], output_len: int, ignore_eos: bool = True) -> dict:
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=ignore_eos)
    stats = llm.engine.scheduler.stats = type(llm.engine.scheduler.stats)()
    llm.engine.scheduler.allocator.reset_prefix_cache()  # every run reads its prompts cold
    started = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    elapsed = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    streams = min(len(prompts), llm.engine.scheduler.config.max_num_seqs)
    result = {"seconds": elapsed, "output_tokens": tokens, "output_tok_s": tokens / elapsed,
              "per_stream_tok_s": tokens / elapsed / streams, "steps": stats.num_steps}
    if stats.num_verify_windows:
        result.update(mean_accepted_length=stats.mean_accepted_length,
                      acceptance_per_position=stats.acceptance_per_position())
    return result


def run_hf(model, prompts: list[list[int]], output_len: int, batch_size: int) -> dict:
    tokens, started = 0, time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        batch = torch.tensor(prompts[i:i + batch_size])  # equal lengths: no padding needed
        with torch.inference_mode():
            out = model.generate(batch, attention_mask=torch.ones_like(batch), do_sample=False,
                                 max_new_tokens=output_len, min_new_tokens=output_len, pad_token_id=0)
        tokens += (out.shape[1] - batch.shape[1]) * batch.shape[0]
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "output_tokens": tokens, "output_tok_s": tokens / elapsed}


def load_hf_peer(model_spec: str, dtype: torch.dtype):
    """HF transformers on the same weights: a GGUF file or an HF folder."""
    import os

    from transformers import AutoModelForCausalLM

    from strata.weights.source import BUNDLED_MODELS, bundled_model_path

    path = bundled_model_path(model_spec) if model_spec in BUNDLED_MODELS else model_spec
    if path.endswith(".gguf"):
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                     dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.eval()


def bench_offline(llm: LLM, model_spec: str, num_prompts: int, input_len: int, output_len: int,
                  concurrency: list[int], repeats: int, hf_peer: bool, seed: int, workload: str = "random",
                  no_spec: LLM | None = None) -> dict:
    if workload == "repetitive":
        prompts, ignore_eos = repetitive_prompts(llm, num_prompts), False
    else:
        prompts, ignore_eos = make_prompts(num_prompts, input_len, llm.engine.model_config.vocab_size, seed), True
    engines = {"strata": llm} if no_spec is None else {"strata_spec": llm, "strata_nospec": no_spec}
    for engine in engines.values():
        run_strata(engine, prompts[:1], 4)  # warm-up
    hf = load_hf_peer(model_spec, getattr(torch, llm.engine.dtype)) if hf_peer else None
    arms: dict[str, list[dict]] = {}
    for _ in range(repeats):
        for c in concurrency:
            for name, engine in engines.items():
                engine.engine.scheduler.config = _with_max_seqs(engine.engine.scheduler.config, c)
                arms.setdefault(f"{name}_c{c}", []).append(run_strata(engine, prompts, output_len, ignore_eos))
            if hf is not None:
                arms.setdefault(f"hf_generate_b{c}", []).append(run_hf(hf, prompts, output_len, c))
    summary = {name: {"median_output_tok_s": statistics.median(r["output_tok_s"] for r in runs),
                      "median_per_stream_tok_s": statistics.median(r.get("per_stream_tok_s", 0.0) for r in runs),
                      "runs": runs} for name, runs in arms.items()}
    for c in concurrency:
        spec, base = summary.get(f"strata_spec_c{c}"), summary.get(f"strata_nospec_c{c}")
        if spec and base:
            spec["speedup_vs_nospec"] = spec["median_output_tok_s"] / base["median_output_tok_s"]
    if hf is not None:
        base = summary.get("hf_generate_b1", {}).get("median_output_tok_s")
        if base:
            for name, entry in summary.items():
                entry["ratio_vs_hf_single_stream"] = entry["median_output_tok_s"] / base
    return summary


def _with_max_seqs(config, max_num_seqs: int):
    import dataclasses

    return dataclasses.replace(config, max_num_seqs=max_num_seqs)
