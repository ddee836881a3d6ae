"""An offloaded decode step's time, layer by layer (issue 23's expert-offload command: 25 % of the 30B-A3B Q4_K_M's
experts on the GPU, the rest on the CPU pool), for several pool sizes in one process: per step, the host parts'
total and within them the wait for the device's copies, the CPU experts (since session 47 the native host part's
whole call) and the rest (Python; the upload, in trees before session 40; since session 48 each host part's own
waits and calls only, and its rest per call), and the time between host parts (the
next graph piece's launch and device work). Arms: pool threads and how long the packed kernel's idle workers poll
before they sleep (cpu_quant.set_spin_us). `pcie=F`: the engine's --pcie-frac (its host parts then also queue the
staging copies: `stage`, timed); `zc=F|auto|measure`: --zero-copy-frac (the device reads that share of each layer's
experts in place from host memory; their pairs leave the CPU's part; 0 unless given, so the arms above compare like
with like).
usage: offload_timeline.py GGUF [cache=25%] [pcie=0] [zc=0] [arms=16:5000,16:200,15:5000,14:5000]"""
import collections
import statistics
import sys
import time

import torch
from host_timing import timed

from strata import LLM, SamplingParams
from strata.config import EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig
from strata.experts import provider
from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.slots import ExpertSlots
from strata.kernels import cpu_quant

path = sys.argv[1]
opts = dict(a.split("=") for a in sys.argv[2:])
arms = [tuple(int(v) for v in arm.split(":")) for arm in opts.get("arms", "16:5000,16:200,15:5000,14:5000").split(",")]
sweep = [threads for threads, _ in arms]
llm = LLM.from_config(EngineConfig(
    model=path, runner=RunnerConfig(device="cuda"), scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16),
    experts=ExpertConfig(expert_cache=opts.get("cache", "25%"), cpu_threads=max(sweep),
                         pcie_frac=opts.get("pcie", "0"), zero_copy_frac=opts.get("zc", "0"),
                         expert_swap_interval=0)))
pool = llm.engine.runner.experts.pool
slots = llm.engine.runner.experts.slots  # the layers with a host part (a static split's first ones have none)
host_layers = sum(not slots.is_layer_resident(layer) for layer in range(llm.engine.runner.experts.num_layers))
prompt = [{"prompt_token_ids": list(range(100, 164))}]
params = SamplingParams(max_tokens=65, temperature=0, ignore_eos=True)
llm.generate(prompt, params)
spans = collections.defaultdict(list)  # name -> seconds of each call
marks = []                             # (start, end) of each host part
host_part, accumulate = provider.OffloadedExperts._host_part, CpuExpertPool.accumulate
event_sync = torch.cuda.Event.synchronize


inside = []  # [1] while a host part runs: only its own waits and CPU calls are counted (the engine syncs too)


def marked(self, *args, **kwargs):
    t = time.perf_counter()
    inside.append(1)
    try:
        return host_part(self, *args, **kwargs)
    finally:
        inside.clear()
        marks.append((t, time.perf_counter()))
        # the host part's rest: what is neither its wait nor its CPU experts (Python, counting)
        spans["rest"].append(marks[-1][1] - t - sum(spans["_wait"]) - sum(spans["_cpu"]))
        spans["_wait"].clear(), spans["_cpu"].clear()


def in_host_part(name, fn):
    """fn timed into spans[name] (and into this host part's spans["_" + short]) only inside a host part."""
    short = {"event_wait": "_wait", "cpu_experts": "_cpu"}.get(name)

    def run(*args, **kwargs):
        if not inside:
            return fn(*args, **kwargs)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - start
            spans[name].append(spent)
            if short:
                spans[short].append(spent)
    return run


provider.OffloadedExperts._host_part = marked
CpuExpertPool.accumulate = in_host_part("cpu_experts", accumulate)
# the native host part (session 47) calls this instead: the CPU experts plus listing and counting the pairs, in C
cpu_quant.offload_host_part = in_host_part("cpu_experts", cpu_quant.offload_host_part)
torch.cuda.Event.synchronize = in_host_part("event_wait", event_sync)
ExpertSlots.stage = timed("stage", ExpertSlots.stage, spans)
if hasattr(provider.HostExchange, "upload"):  # the host part's upload (before session 40)
    provider.HostExchange.upload = timed("upload", provider.HostExchange.upload, spans)
for threads, spin in arms * 2:
    pool.num_threads = threads
    cpu_quant.set_spin_us(spin)
    spans.clear(), marks.clear()
    torch.cuda.synchronize()
    t = time.perf_counter()
    llm.generate(prompt, params)
    wall = time.perf_counter() - t
    parts = [end - start for start, end in marks]
    gaps = [marks[i + 1][0] - marks[i][1] for i in range(len(marks) - 1)]
    steps = len(parts) / host_layers
    line = (f"threads {threads} spin {spin} us: {wall / 64 * 1e3:.2f} ms a token; per layer step (median us): "
            f"host part {statistics.median(parts) * 1e6:.0f}")
    for name in ("event_wait", "stage", "cpu_experts", "upload", "rest"):
        if spans[name]:
            line += f", {name} {statistics.median(spans[name]) * 1e6:.0f}"
    line += (f", between host parts {statistics.median(gaps) * 1e6:.0f}; totals a step (ms): host parts "
             f"{sum(parts) / steps * 1e3:.2f}, cpu {sum(spans['cpu_experts']) / steps * 1e3:.2f}, between "
             f"{sum(gaps) / steps * 1e3:.2f}; cpu p90 "
             f"{statistics.quantiles(spans['cpu_experts'], n=10)[-1] * 1e6 if len(spans['cpu_experts']) > 1 else 0:.0f}"
             " us")
    line += (f"; pcie {opts.get('pcie', '0')} zc {opts.get('zc', '0')}, {len(spans['stage']) / steps:.1f} staging calls"
             f" a step; {host_layers} layers with a host part")
    print(line, flush=True)
