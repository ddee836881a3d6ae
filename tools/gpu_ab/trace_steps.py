"""Chrome traces of graph-replayed decode steps at given stream counts: `python3 trace_steps.py MODEL OUT_PREFIX
[streams ...]` writes OUT_PREFIX.c{N}.json.gz (the kernels of a generate of 6 tokens a stream after a warm-up
that captured the layouts) and prints each kernel's time on the critical path per decode step: from the end of
the kernel before it to its own end (PDL lets a kernel start before its predecessor ends, so its duration alone
overstates it), then the decode steps' first TRACE_SEQUENCE (30) kernels in order: one layer's launches."""
import collections, gzip, json, os, sys
from torch.profiler import ProfilerActivity, profile
from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig

path, prefix = sys.argv[1], sys.argv[2]
streams = [int(s) for s in sys.argv[3:]] or [1, 8]
SEQUENCE = int(os.environ.get("TRACE_SEQUENCE", "30"))
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16)))
prompt = {"prompt_token_ids": list(range(100, 164))}
for n in streams:
    llm.generate([prompt] * n, SamplingParams(max_tokens=40, temperature=0, ignore_eos=True))  # warm + capture
for n in streams:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        llm.generate([prompt] * n, SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
    name = f"{prefix}.c{n}.json"
    prof.export_chrome_trace(name)
    events = json.load(open(name))["traceEvents"]
    with open(name, "rb") as src, gzip.open(name + ".gz", "wb") as dst:
        dst.write(src.read())
    os.remove(name)
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    # decode steps only: from the first kernel after the prompt step's last long gap (> 200 us idle)
    start = max((i for i in range(1, len(kernels)) if kernels[i]["ts"] - kernels[i - 1]["ts"] - kernels[i - 1]["dur"] > 200),
                default=0)
    critical = collections.defaultdict(lambda: [0, 0.0])
    end = kernels[start]["ts"]
    sequence = []  # (name, duration, critical us) of the decode steps' first kernels: one layer's order
    for e in kernels[start:]:
        finish = e["ts"] + e["dur"]
        critical[e["name"][:60]][0] += 1
        critical[e["name"][:60]][1] += max(0.0, finish - end)
        if len(sequence) < SEQUENCE:
            sequence.append((e["name"][:60], e["dur"], max(0.0, finish - end)))
        end = max(end, finish)
    span = end - kernels[start]["ts"]
    print(f"===== {n} streams: {len(kernels) - start} kernels from the decode steps' start, {span:.1f} us")
    for key, (count, us) in sorted(critical.items(), key=lambda kv: -kv[1][1])[:30]:
        print(f"{us:10.1f} us {count:6d}x  {us / count:7.2f} us each  {key}")
    print(f"-- the first {len(sequence)} kernels in order: duration, critical-path us, name")
    for name_, dur, crit in sequence:
        print(f"{dur:8.2f} {crit:8.2f}  {name_}")
