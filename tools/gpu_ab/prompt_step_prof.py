"""Where a prompt step's device time goes on issue 28's hybrid model: wall of a 1-token generate at 16/64/128-token
prompts (CUDA graphs on; PROMPT_LENS), then the kernel totals of five PROF_LEN-token prompts under torch's profiler."""
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig

path = sys.argv[1] if len(sys.argv) > 1 else "random:qwen3-next-80b-a3b?num_hidden_layers=8"
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16)))
one = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
prompt = lambda n, s: {"prompt_token_ids": [(s * 7919 + i * 104729) % 150000 + 100 for i in range(n)]}  # noqa: E731
lens = [int(n) for n in os.environ.get("PROMPT_LENS", "16,64,128").split(",")]
prof_len = int(os.environ.get("PROF_LEN", "64"))
for n in lens:
    for s in range(3):
        llm.generate([prompt(n, s)], one)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for s in range(3, 13):
        llm.generate([prompt(n, s)], one)
    torch.cuda.synchronize()
    print(f"prompt {n}: {(time.perf_counter() - t) / 10 * 1e3:.2f} ms a 1-token generate", flush=True)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for s in range(20, 25):
        llm.generate([prompt(prof_len, s)], one)
events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
total = sum(e.self_device_time_total for e in events)
print(f"{prof_len}-token prompt: kernels {total / 5e3:.2f} ms a prompt")
for e in sorted(events, key=lambda e: -e.self_device_time_total)[:25]:
    print(f"{e.self_device_time_total / 5:9.1f} us {e.count / 5:6.1f} calls {e.key[:110]}")
