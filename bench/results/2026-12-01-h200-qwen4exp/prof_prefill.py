"""Kernel times of 512-token prefills on the 4-layer Qwen4-Exp shape (bf16), after a warm-up prefill."""
import time, torch
from torch.profiler import profile, ProfilerActivity
from strata import LLM, SamplingParams
spec = "random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none"
llm = LLM(spec, dtype="bfloat16", device="cuda", max_num_seqs=1, max_model_len=1024)
one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
for i in range(3):
    torch.cuda.synchronize(); t = time.perf_counter()
    llm.generate([{"prompt_token_ids": [(7 * j + i) % 240000 + 5 for j in range(512)]}], one)
    torch.cuda.synchronize(); print(f"prefill {i}: {(time.perf_counter() - t) * 1e3:.1f} ms")
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    llm.generate([{"prompt_token_ids": [(11 * j) % 240000 + 5 for j in range(512)]}], one)
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))
