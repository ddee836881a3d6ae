"""Kernel-level profile of single-stream (and c8) decode on a model: eager and graphed, CUDA kernel totals per step."""
import sys, time, torch
from torch.profiler import profile, ProfilerActivity
from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig

import json
from strata.config import SpecConfig
path = sys.argv[1]
graphs = sys.argv[2] == "graphs"
spec = SpecConfig.from_json(sys.argv[3]) if len(sys.argv) > 3 else None  # e.g. synthetic L=3, k=3
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda", cuda_graphs=graphs),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16),
                                   **({"speculative": spec} if spec else {})))
short = {"prompt_token_ids": list(range(100, 164))}
for _ in range(2):
    llm.generate([short], SamplingParams(max_tokens=40, temperature=0, ignore_eos=True))
for conc, steps in [(1, 64), (8, 32)]:
    p = SamplingParams(max_tokens=steps + 1, temperature=0, ignore_eos=True)
    torch.cuda.synchronize(); t = time.perf_counter()
    llm.generate([short] * conc, p)
    torch.cuda.synchronize(); wall = time.perf_counter() - t
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        llm.generate([short] * conc, p)
    print(f"===== {path} graphs={graphs} c{conc}: {steps} steps, wall {wall*1e3:.1f} ms ({wall/steps*1e3:.3f} ms/step incl prefill)")
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.self_device_time_total for e in events)
    print(f"kernel total {total/1e3:.1f} ms = {total/steps:.1f} us/step")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:30]:
        print(f"{e.self_device_time_total/steps:9.1f} us/step {e.count/steps:6.1f}/step {e.self_device_time_total/max(e.count,1):8.1f} us/call  {e.key[:110]}")
