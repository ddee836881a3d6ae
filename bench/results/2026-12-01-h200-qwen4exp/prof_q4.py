"""Kernel times of Qwen4-Exp decode steps (4 layers, bf16), eager so each kernel is listed; device sums."""
import sys, torch
from torch.profiler import profile, ProfilerActivity
from strata import LLM, SamplingParams
spec = "random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none"
llm = LLM(spec, dtype="bfloat16", device="cuda", max_num_seqs=1, cuda_graphs=False, max_model_len=1024)
p = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
llm.generate([{"prompt_token_ids": list(range(100, 164))}], p)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    llm.generate([{"prompt_token_ids": list(range(200, 264))}], SamplingParams(temperature=0.0, max_tokens=33, ignore_eos=True))
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70))
