"""Kernel time of decode steps of a GGUF model with CUDA graphs on (CUPTI records the kernels inside graph
replays): `python3 prof_q4km.py FILE [streams ...]` prints per stream count the top 40 kernels by device time,
the launches and the device time per decode step (CUPTI adds its own cost to each kernel: compare counts, not
absolute times, with unprofiled runs)."""
import sys
from torch.profiler import ProfilerActivity, profile
from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig

path = sys.argv[1]
streams = [int(s) for s in sys.argv[2:]] or [1, 8]
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16)))
short = {"prompt_token_ids": list(range(100, 164))}
for n in streams:
    llm.generate([short] * n, SamplingParams(max_tokens=40, temperature=0, ignore_eos=True))  # warm + capture
for n in streams:
    steps = 32
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        llm.generate([short] * n, SamplingParams(max_tokens=steps + 1, temperature=0, ignore_eos=True))
    events = prof.key_averages()
    total = sum(e.device_time_total for e in events if e.device_time_total > 0 and e.key != "")
    print(f"===== {n} streams: {steps} decode steps + 1 prompt step; device time {total / 1e3:.2f} ms, "
          f"{total / (steps + 1):.1f} us a step")
    launches = sum(e.count for e in events if e.device_time_total > 0 and e.key != "")
    print(f"kernels and copies a step: {launches / (steps + 1):.1f}")
    for e in sorted(events, key=lambda e: -e.device_time_total)[:40]:
        print(f"{e.device_time_total / (steps + 1):9.1f} us/step {e.count / (steps + 1):6.1f}/step  {e.key[:90]}")
