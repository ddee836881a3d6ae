"""Expert-cache sweep: decode speed and where routed experts ran, against the share of experts resident
on the device, for two placements at the same VRAM:

- learned: the hot set filled from a routing profile recorded on a separate prompt set of the same
  workload, then updated while serving (swaps every `swap_interval` steps);
- static: whole layers from the first resident, the rest on the CPU, never swapped (the split
  llama.cpp's --n-cpu-moe makes).

The partial arms share one engine whose experts are re-placed between arms; the all-resident arm (and
the profile recording) use their own engine, which replays CUDA graphs on a GPU.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import tempfile

import torch

from strata.bench.offline import make_prompts, run_strata
from strata.config import EngineConfig, ExpertConfig
from strata.engine.llm import LLM


def bench_experts(config: EngineConfig, cache_sizes: list[str], placements: list[str], num_prompts: int,
                  input_len: int, output_len: int, seed: int, swap_interval: int = 32,
                  profile_path: str | None = None) -> dict:
    """Every placement x size arm on one engine whose experts are re-placed between arms (the host
    copies are kept); the all-resident arm and the profile recording use a second engine."""
    vocab = _vocab_size(config)
    prompts = make_prompts(num_prompts, input_len, vocab, seed)
    results: dict[str, dict] = {}
    full = LLM.from_config(dataclasses.replace(config, experts=_placement(config.experts, "all", "all", 0, None)))
    if "learned" in placements:  # the profile comes from another prompt set of the same workload
        profile_path = profile_path or os.path.join(tempfile.mkdtemp(), "profile.json")
        run_strata(full, make_prompts(num_prompts, input_len, vocab, seed + 1), output_len)
        full.engine.experts.save_profile(profile_path)
    if any(_is_all(size) for size in cache_sizes):
        results[f"all_{next(s for s in cache_sizes if _is_all(s))}"] = _measure(full, prompts, output_len, "all", "all")
    _release(full)
    partial = None
    for size in (s for s in cache_sizes if not _is_all(s)):
        for placement in placements:
            experts = _placement(config.experts, size, placement, swap_interval, profile_path)
            if partial is None:
                partial = LLM.from_config(dataclasses.replace(config, experts=experts))
            else:
                partial.engine.experts.replace(experts, partial.engine.device)
            results[f"{placement}_{size}"] = _measure(partial, prompts, output_len, size, placement)
    if partial is not None:
        _release(partial)
    for size in cache_sizes:
        learned, static = results.get(f"learned_{size}"), results.get(f"static_{size}")
        if learned and static:
            learned["speedup_vs_static"] = learned["output_tok_s"] / static["output_tok_s"]
    return results


def _measure(llm: LLM, prompts: list[list[int]], output_len: int, size: str, placement: str) -> dict:
    run_strata(llm, prompts[:1], 4)  # warm-up
    run = run_strata(llm, prompts, output_len)
    snapshot = llm.engine.experts.snapshot()
    return {"expert_cache": size, "placement": placement, "resident_slots": snapshot["resident_slots"],
            "total_experts": snapshot["total_experts"], "output_tok_s": run["output_tok_s"],
            "per_stream_tok_s": run["per_stream_tok_s"], "ttft_ms": run.get("ttft_ms"),
            # per stream after the first token (the prompt's pass left out), llama-bench's "tg" rate
            "decode_tok_s": 1e3 / run["tpot_ms"]["mean"] if run.get("tpot_ms", {}).get("mean") else None,
            "experts": {k: v for k, v in snapshot.items() if k != "counts"}}


def _placement(base: ExpertConfig, size: str, placement: str, swap_interval: int,
               profile_path: str | None) -> ExpertConfig:
    if placement == "all":
        return dataclasses.replace(base, expert_cache="all", expert_profile=None)
    if placement == "learned":
        return dataclasses.replace(base, expert_cache=size, expert_profile=profile_path,
                                   expert_swap_interval=swap_interval)
    if placement == "static":
        return dataclasses.replace(base, expert_cache=size, expert_profile=None, expert_split="static",
                                   expert_swap_interval=0)
    raise ValueError(f"unknown placement {placement!r}; use learned, static")


def _is_all(size: str) -> bool:
    return size.strip().lower() in ("all", "100%", "auto")


def _vocab_size(config: EngineConfig) -> int:
    from strata.weights.source import open_source

    return open_source(config.model).model_config().vocab_size


def _release(llm: LLM) -> None:
    if llm.engine.experts is not None and llm.engine.experts.pool is not None:
        llm.engine.experts.pool.close()
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
