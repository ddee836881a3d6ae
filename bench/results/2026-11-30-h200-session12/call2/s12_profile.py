"""Device-only: the critical path of the single-stream decode graph with PDL on. With PDL a kernel starts
early and waits, so durations overlap; what a kernel adds to the step is end[i] - end[i-1]. Prints that
increment per kernel name and per position in a layer, averaged over replays and layers."""
import collections, os, statistics, sys
import torch
from torch.profiler import profile, ProfilerActivity
from strata import LLM, SamplingParams

model = "random:qwen3-30b-a3b?num_hidden_layers=24"
llm = LLM(model, dtype="bfloat16", device="cuda", max_num_seqs=4, max_model_len=4096, quiet=True)
V = llm.engine.model_config.vocab_size
plen = int(os.environ.get("PROMPT_LEN", 64))
prompt = [{"prompt_token_ids": torch.randint(100, V, (plen,), generator=torch.Generator().manual_seed(0)).tolist()}]
params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
llm.generate(prompt, params)
cap = llm.engine.runner.graphs.graphs[(1, 1)]
for _ in range(10):
    cap.graph.replay(1)
torch.cuda.synchronize()
REPLAYS = 20
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(REPLAYS):
        cap.graph.replay(1)
        torch.cuda.synchronize()
    llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))
    torch.cuda.synchronize()
evs = [e for e in prof.events() if e.device_type.name == "CUDA" and "Memcpy" not in e.name and "Memset" not in e.name]
evs.sort(key=lambda e: e.time_range.start)
# split into replays: a gap of > 20 us between one kernel's end and the next start separates them
groups, cur = [], []
for e in evs:
    if cur and e.time_range.start - max(x.time_range.end for x in cur[-3:]) > 20:
        groups.append(cur); cur = []
    cur.append(e)
groups.append(cur)
sizes = collections.Counter(len(g) for g in groups)
print("groups by size:", sizes.most_common(6))
n = max(k for k, c in sizes.items() if c >= REPLAYS)
reps = [g for g in groups if len(g) == n][:REPLAYS]
def short(name):
    return name.split("(")[0].split("<")[0][:40]
names = [short(e.name) for e in reps[0]]
per_pos = collections.defaultdict(list)
total = []
for g in reps:
    total.append(g[-1].time_range.end - g[0].time_range.start)
    for i in range(1, len(g)):
        per_pos[i].append(g[i].time_range.end - g[i - 1].time_range.end)
print(f"replays {len(reps)} of {n} kernels: first start -> last end median {statistics.median(total):.1f} us")
print("first kernel", names[0], "duration", statistics.median(g[0].time_range.end - g[0].time_range.start for g in reps))
import json
dump = {"names": names, "end_delta": [0.0] + [statistics.median(per_pos[i]) for i in range(1, n)],
        "duration": [statistics.median(g[i].time_range.end - g[i].time_range.start for g in reps) for i in range(n)],
        "start_delta": [0.0] + [statistics.median(g[i].time_range.start - g[i - 1].time_range.start for g in reps)
                                for i in range(1, n)], "total": statistics.median(total)}
json.dump(dump, open(os.path.join(os.environ.get("OUT", "."), f"profile{plen}.json"), "w"))
for i in range(n):
    print(f"{i:4d} {names[i]:40s} end-delta {dump['end_delta'][i]:7.2f} dur {dump['duration'][i]:7.2f} start-delta {dump['start_delta'][i]:7.2f}")
print("last 6 kernels of a replay:", [(names[i], round(statistics.median(per_pos[i]), 2)) for i in range(n - 6, n)])
# the generate part: kernels outside the graph
out = collections.defaultdict(list)
for g in groups:
    if len(g) < n:
        for e in g:
            out[short(e.name)].append(e.time_range.end - e.time_range.start)
for k, v in sorted(out.items(), key=lambda kv: -sum(kv[1]))[:14]:
    print(f"outside-graph group kernel {k:40s} n={len(v):4d} median {statistics.median(v):7.2f} us")
