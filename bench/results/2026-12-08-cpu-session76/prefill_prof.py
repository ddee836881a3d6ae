import time, torch
from strata import LLM, SamplingParams
llm = LLM()
ids = torch.randint(100, 40000, (4096,)).tolist()
sp = SamplingParams(max_tokens=1, temperature=0)
llm.generate([{"prompt_token_ids": ids[:600]}], sp)
from torch.profiler import profile, ProfilerActivity
t = time.perf_counter()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    llm.generate([{"prompt_token_ids": ids}], sp)
print("wall", time.perf_counter() - t)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
