"""Profile a Q4_K_M engine: CUDA kernel time of decode steps at c1 and of one 512-token prefill (eager)."""
import os, sys, torch
from torch.profiler import profile, ProfilerActivity
from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig

path = sys.argv[1]
device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
print("building", flush=True)
llm = LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device=device, cuda_graphs=False),
                                   scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=16)))
prompt = {"prompt_token_ids": list(range(100, 612))}
short = {"prompt_token_ids": list(range(100, 164))}
for _ in range(2):
    llm.generate([prompt], SamplingParams(max_tokens=1, temperature=0))
    llm.generate([short], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
print("warm", flush=True)
for name, prompts, params in [("prefill512", [prompt], SamplingParams(max_tokens=1, temperature=0)),
                              ("decode_c1_32", [short], SamplingParams(max_tokens=33, temperature=0, ignore_eos=True)),
                              ("decode_c16_16", [short] * 16, SamplingParams(max_tokens=17, temperature=0, ignore_eos=True))]:
    with profile(activities=[ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU]) as prof:
        llm.generate(prompts, params)
        pass
    print(f"===== {name}")
    print(prof.key_averages().table(sort_by=("cuda_time_total" if device == "cuda" else "cpu_time_total"), row_limit=18, max_name_column_width=70))
