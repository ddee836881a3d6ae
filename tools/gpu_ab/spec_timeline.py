"""Where a speculative step's wall time goes, from a CPU + CUDA trace: `python3 spec_timeline.py MODEL OUT_PREFIX
[streams ...]` runs synthetic speculation (L = 3, k = 3) and plain decode at each stream count, then per arm
prints the wall time a decode step, the device's busy time a step (the union of its kernels' intervals) and
the host ops (aten ops, launches, copies, syncs) that ran while the device was idle, largest first: the host
work a step does not hide. Writes OUT_PREFIX.{arm}.c{N}.json.gz (chrome traces) unless OUT_PREFIX is "-"."""
import collections
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig
from trace_intervals import device_work, idle_gaps, union

path, prefix = sys.argv[1], sys.argv[2]
streams = [int(s) for s in sys.argv[3:]] or [1, 4]
SPEC = '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
TOKENS = 48


def run(arm):
    spec = SpecConfig.from_json(SPEC) if arm == "spec" else None
    llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                       scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16),
                                       **({"speculative": spec} if spec else {})))
    for n in streams:
        prompts = [{"prompt_token_ids": list(range(100 + i, 164 + i))} for i in range(n)]
        params = SamplingParams(max_tokens=TOKENS, temperature=0, ignore_eos=True)
        for _ in range(2):
            llm.generate(prompts, params)  # capture every layout
        llm.engine.step_times.__init__()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t = time.perf_counter()
            llm.generate(prompts, params)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t
        split = llm.engine.step_times.as_dict()["decode"]
        steps = max(1, split["num_steps"])
        events = prof.events()
        kernels = [(a, b) for a, b, _ in device_work(events)]
        first, last = min(a for a, _ in kernels), max(b for _, b in kernels)
        busy = union(kernels)
        gaps = idle_gaps(kernels, first, last)
        host = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
        exposed = collections.Counter()
        for e in host:  # a host op's time inside device-idle gaps (top-level and nested ops both count)
            a, b = e.time_range.start, e.time_range.end
            for g0, g1 in gaps:
                if g1 <= a:
                    continue
                if g0 >= b:
                    break
                exposed[e.name] += min(b, g1) - max(a, g0)
        idle = sum(b - a for a, b in gaps)
        covered = sum(union([(max(e.time_range.start, g0), min(e.time_range.end, g1)) for e in host
                             if e.time_range.start < g1 and e.time_range.end > g0]) for g0, g1 in gaps)
        print(f"===== {arm}, {n} streams: generate {wall * 1e3:.1f} ms, {split['num_steps']} decode steps, "
              f"{split.get('tokens_per_step', 0):.2f} tokens a step; split {split}")
        print(f"device span {(last - first) / 1e3:.1f} ms, busy {busy / 1e3:.1f} ms ({busy / steps:.0f} us a decode "
              f"step), idle {idle / 1e3:.1f} ms ({idle / steps:.0f} us a step) in {len(gaps)} gaps")
        big = sorted(gaps, key=lambda g: g[0] - g[1])[:5]
        print("largest gaps (us):", [round(b - a, 1) for a, b in big])
        print(f"idle with no host op recorded (Python): {(idle - covered) / steps:.0f} us a step")
        for name, us in exposed.most_common(25):
            print(f"{us / steps:9.1f} us/step exposed  {name[:100]}")
        if prefix != "-":
            prof.export_chrome_trace(f"{prefix}.{arm}.c{n}.json")
    del llm
    torch.cuda.empty_cache()


for arm in ("spec", "plain"):
    try:
        run(arm)
    except Exception:
        import traceback
        traceback.print_exc()
