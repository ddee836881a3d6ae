"""Where an offloaded decode step's time goes (issue 23's expert-offload command: 25 % of the experts on the GPU, the
rest computed by CPU threads): per-step wall, then each offloaded layer's host part split into its wait for the
device's copies, the CPU experts (CpuExpertPool.accumulate) and the rest, then cProfile's top functions of one
generate. Session 39 found this step at 21.9 ms against 5.9 at 7376f35 (same machine, file and command).
usage: offload_prof.py GGUF [cache=25%] [threads=16]"""
import cProfile
import collections
import os
import pstats
import sys
import time

import torch
from host_timing import timed

from strata import LLM, SamplingParams
from strata.config import EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig
from strata.experts import provider
from strata.experts.cpu_pool import CpuExpertPool

path = sys.argv[1]
opts = dict(a.split("=") for a in sys.argv[2:])
llm = LLM.from_config(EngineConfig(
    model=path, runner=RunnerConfig(device="cuda"), scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16),
    experts=ExpertConfig(expert_cache=opts.get("cache", "25%"), cpu_threads=int(opts.get("threads", 16)),
                         pcie_frac="0", expert_swap_interval=0)))
prompt = [{"prompt_token_ids": list(range(100, 164))}]
params = SamplingParams(max_tokens=65, temperature=0, ignore_eos=True)
llm.generate(prompt, params)
spans = collections.defaultdict(list)  # name -> seconds of each call


provider.OffloadedExperts._host_part = timed("host_part", provider.OffloadedExperts._host_part, spans)
CpuExpertPool.accumulate = timed("cpu_experts", CpuExpertPool.accumulate, spans)
torch.cuda.Event.synchronize = timed("event_wait", torch.cuda.Event.synchronize, spans)
torch.cuda.Stream.synchronize = timed("stream_wait", torch.cuda.Stream.synchronize, spans)
graph_stats = getattr(llm.engine.runner, "graph_stats", lambda: "(no graph_stats in this tree)")
print(f"torch threads {torch.get_num_threads()}, OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY')}")
before = graph_stats()
torch.cuda.synchronize()
t = time.perf_counter()
llm.generate(prompt, params)
wall = time.perf_counter() - t
print(f"64 steps in {wall * 1e3:.1f} ms ({wall / 64 * 1e3:.2f} ms a step)")
# do the offloaded decode steps replay their split graphs, or run eagerly?
print("graphs before / after the timed generate:", before, graph_stats())
for name, seconds in spans.items():
    total = sum(seconds)
    print(f"  {name}: {len(seconds)} calls, {total * 1e3:.1f} ms, {total / len(seconds) * 1e6:.0f} us each")
prof = cProfile.Profile()
prof.enable()
llm.generate(prompt, params)
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
