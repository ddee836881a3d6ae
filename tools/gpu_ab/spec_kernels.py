"""Where a speculative decode step's device time goes, kernel by kernel, against plain decoding:
`python3 spec_kernels.py MODEL STREAMS [TOKENS]` runs synthetic speculation (L = 3, k = 3) and plain decoding (one
load, the weights shared) at STREAMS streams and prints per arm:
- the engine's decode steps untraced: wall a step, tokens a step, and its forward / sample / draft split;
- each kernel's critical-path time a decode step (from the end of the kernel before it to its own end), from a
  CUDA-only trace of a TOKENS-token generate minus a 1-token generate of the same prompt shapes (the prompt step
  cancels), divided by the decode steps; the device's idle time a step likewise, and the traced generate's idle
  gaps by size (spread over launches, or a few long waits on the host).
Writes nothing else; no CPU trace (it would slow the host side it measures)."""
import collections
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig

path, streams = sys.argv[1], int(sys.argv[2])
TOKENS = int(sys.argv[3]) if len(sys.argv) > 3 else 48
DEVICE = os.environ.get("SPEC_KERNELS_DEVICE", "cuda")  # "cpu": a dry run of this script (CPU ops as "kernels")
SPEC = '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def prompts(offset):
    return [{"prompt_token_ids": list(range(offset + 100 * i, offset + 100 * i + 64))} for i in range(streams)]


def params(n):
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


def critical_path(llm, offset, n):
    """{kernel name: critical-path us} and the idle us between the first and last kernel."""
    sync()
    kind = torch.autograd.DeviceType.CUDA if DEVICE == "cuda" else torch.autograd.DeviceType.CPU
    with profile(activities=[ProfilerActivity.CUDA if DEVICE == "cuda" else ProfilerActivity.CPU]) as prof:
        llm.generate(prompts(offset), params(n))
        sync()
    kernels = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                      if e.device_type == kind and e.time_range.end > e.time_range.start))
    per_name, end, gaps = collections.Counter(), kernels[0][0], []
    for a, b, name in kernels:
        gaps.append(max(0.0, a - end))
        per_name[name[:90]] += max(0.0, b - max(a, end))
        end = max(end, b)
    return per_name, gaps


def measure(arm, llm):
    for offset in (0, 10_000):
        llm.generate(prompts(offset), params(TOKENS))  # capture every layout
    llm.engine.step_times.__init__()
    sync()
    t = time.perf_counter()
    llm.generate(prompts(20_000), params(TOKENS))
    sync()
    wall = time.perf_counter() - t
    split = llm.engine.step_times.as_dict()["decode"]
    steps = max(1, split["num_steps"])
    print(f"===== {arm}, {streams} streams: generate {wall * 1e3:.1f} ms; decode steps {split['num_steps']}, "
          f"{split['wall_seconds'] / steps * 1e6:.0f} us a step (forward {split['forward_seconds'] / steps * 1e6:.0f}, "
          f"sample {split['sample_seconds'] / steps * 1e6:.0f}, draft {split['draft_seconds'] / steps * 1e6:.0f}), "
          f"{split.get('tokens_per_step', 0):.2f} tokens a step")
    full, gaps_full = critical_path(llm, 30_000, TOKENS)
    prompt_only, gaps_prompt = critical_path(llm, 40_000, 1)
    decode = {name: full[name] - prompt_only.get(name, 0.0) for name in full}
    busy = sum(decode.values()) / steps
    print(f"device a decode step: busy {busy:.0f} us, idle {(sum(gaps_full) - sum(gaps_prompt)) / steps:.0f} us; "
          f"the whole generate's idle gaps by size (us: count, total): " + ", ".join(
              f">{low}: {sum(1 for g in gaps_full if g > low)}, {sum(g for g in gaps_full if g > low):.0f}"
              for low in (5, 20, 100, 500)) + f"; largest {[round(g) for g in sorted(gaps_full)[-6:]]}")
    for name, us in sorted(decode.items(), key=lambda kv: -kv[1])[:28]:
        print(f"{us / steps:9.1f} us/step  {name}")


plain = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device=DEVICE),
                                     scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16)))
spec = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device=DEVICE),
                                    scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16),
                                    speculative=SpecConfig.from_json(SPEC)), share_model_of=plain)
for arm, llm in (("spec", spec), ("plain", plain), ("spec", spec)):
    measure(arm, llm)
