"""Where the device idles in a whole closed-loop run (the issues' speculation command: 32 prompts of 64 tokens,
128 out, synthetic L = 3, k = 3, or plain): `python3 run_idle.py MODEL [streams=4] [arms=spec,plain,mixed]`
(mixed: speculation with STRATA_MIXED_GRAPHS=1).

Per arm: one unprofiled run (tok/s, as the bench's loop gives it, with its experts meter), then one under a CPU +
CUDA trace. The trace's device-idle gaps are put down to the engine step whose host range holds the gap's start
(by that step's kind: decode / verification, a step carrying prompt tokens, the first step after one) or to the
loop between steps (admissions, the meter, the deltas). The profiler slows the host, so the gaps are upper bounds;
their split is what this is for."""
import bisect
import collections
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from strata import LLM
from strata.bench.latency import DecodeExpertsMeter, run_closed_loop
from strata.bench.offline import make_prompts
from strata.types import SamplingParams
from trace_intervals import device_work, idle_gaps, union

path = sys.argv[1]
opts = dict(a.split("=", 1) for a in sys.argv[2:])
streams = int(opts.get("streams", 4))
SPEC = {"method": "synthetic", "acceptance_length": 3.0, "num_speculative_tokens": 3}


def run(arm):
    os.environ["STRATA_MIXED_GRAPHS"] = "1" if arm == "mixed" else "0"  # mixed: spec, windows and prompts one graph
    llm = LLM(model=path, device=opts.get("device", "cuda"), max_model_len=4096, max_num_seqs=streams,
              speculative_config=None if arm == "plain" else SPEC)
    core = llm.engine
    prompts = make_prompts(32, 64, core.model_config.vocab_size, 0)
    params = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)
    run_closed_loop(core, prompts, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True), streams)
    for repeat in (1, 2):  # untraced, as the bench runs them
        core.scheduler.allocator.reset_prefix_cache()
        reqs, elapsed = run_closed_loop(core, prompts, params, streams, DecodeExpertsMeter(core))
        print(f"== {arm} c{streams} run {repeat}: {sum(r.num_tokens for r in reqs) / elapsed:.1f} tok/s")
    kinds = []
    step = core.step

    def labelled_step():
        decode = core.step_times.decode.num_steps
        with record_function("strata_step"):
            out = step()
        kinds.append("decode" if core.step_times.decode.num_steps > decode else "prompt")
        return out

    core.step = labelled_step
    core.scheduler.allocator.reset_prefix_cache()
    if not torch.cuda.is_available():
        return
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        reqs, elapsed = run_closed_loop(core, prompts, params, streams, DecodeExpertsMeter(core))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
    core.step = step
    events = prof.events()
    steps = sorted((e.time_range.start, e.time_range.end) for e in events  # the host ranges, not their GPU echoes
                   if e.name == "strata_step" and e.device_type == torch.autograd.DeviceType.CPU)
    named = [work for work in device_work(events) if work[2] != "strata_step"]  # (an echo's name, to be sure)
    kernels = [(a, b) for a, b, _ in named]
    first, last = min(a for a, _ in kernels), max(b for _, b in kernels)
    gaps = idle_gaps(kernels, first, last)
    labels = []
    for i, kind in enumerate(kinds[:len(steps)]):
        after_prompt = i > 0 and kinds[i - 1] == "prompt"
        labels.append(kind if not (after_prompt and kind == "decode") else "decode after a prompt step")
    where = collections.Counter()
    count = collections.Counter()
    j = 0
    for g0, g1 in gaps:
        while j < len(steps) and steps[j][1] < g0:
            j += 1
        key = labels[j] if j < len(labels) and steps[j][0] <= g0 else "between steps (loop)"
        where[key] += g1 - g0
        count[key] += 1
    busy = union(kernels)
    print(f"===== {arm} c{streams} traced: {sum(r.num_tokens for r in reqs) / elapsed:.1f} tok/s, wall {wall * 1e3:.1f}"
          f" ms, device span {(last - first) / 1e3:.1f} ms, busy {busy / 1e3:.1f} ms, idle "
          f"{sum(b - a for a, b in gaps) / 1e3:.1f} ms in {len(gaps)} gaps; steps {collections.Counter(labels)}")
    for key, us in where.most_common():
        print(f"  idle {us / 1e3:8.2f} ms in {count[key]:5d} gaps: {key}")
    big = sorted(gaps, key=lambda g: g[0] - g[1])[:8]
    print("  largest gaps (us):", [round(b - a, 1) for a, b in big])
    by_kind(labels, steps, named)
    del llm
    torch.cuda.empty_cache()


def by_kind(labels, steps, named):
    """Per step kind: host ms a step, device-busy ms within its host range, and the kernels started in it (top=N of
    them, 14 by default), summed by name, per step. A step's range may hold the end of a step planned before it."""
    starts = [a for a, _, _ in named]
    for kind in sorted(set(labels)):
        ranges = [steps[i] for i, k in enumerate(labels) if k == kind]
        per_name = collections.Counter()
        busy = 0.0
        for s0, s1 in ranges:
            inside = named[bisect.bisect_left(starts, s0):bisect.bisect_right(starts, s1)]
            busy += union([(a, min(b, s1)) for a, b, _ in inside])
            for a, b, name in inside:
                per_name[name] += b - a
        n = len(ranges)
        host = sum(b - a for a, b in ranges) / n / 1e3
        print(f"  {kind}: {n} steps, host {host:.2f} ms a step, device busy in it {busy / n / 1e3:.2f} ms")
        for name, us in per_name.most_common(int(opts.get("top", 14))):
            print(f"    {us / n:8.1f} us  {name[:110]}")


for arm in opts.get("arms", "spec,plain").split(","):
    try:
        run(arm)
    except Exception:
        import traceback
        traceback.print_exc()
