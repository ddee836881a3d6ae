"""Device-only: per-kernel device time of single-stream decode steps under CUDA graphs (and eager)."""
import sys, time
import torch
from torch.profiler import profile, ProfilerActivity
from strata import LLM, SamplingParams

model = sys.argv[1] if len(sys.argv) > 1 else "random:qwen3-30b-a3b?num_hidden_layers=24"
mode = sys.argv[2] if len(sys.argv) > 2 else "graph"
llm = LLM(model, dtype="bfloat16", device="cuda", max_num_seqs=4, max_model_len=2048, quiet=True)
params = SamplingParams(temperature=0.0, max_tokens=129, ignore_eos=True)
prompt = [{"prompt_token_ids": list(range(1000, 1008))}]
llm.engine.runner.use_cuda_graphs = mode == "graph"
llm.generate(prompt, params)
torch.cuda.synchronize(); t = time.perf_counter(); llm.generate(prompt, params); torch.cuda.synchronize()
print(f"{mode}: wall per token {1e3 * (time.perf_counter() - t) / 129:.3f} ms (129 tokens incl. prefill)")
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    llm.generate(prompt, params)
rows = [(e.key[:100], e.count, e.self_device_time_total) for e in prof.key_averages() if e.self_device_time_total > 0]
rows.sort(key=lambda r: -r[2])
total = sum(r[2] for r in rows)
print(f"{mode}: device us total {total:.0f}, per token {total / 129:.1f}, launches {sum(r[1] for r in rows)}")
for r in rows[:40]:
    print(f"{r[2]:9.0f} us {r[1]:6d}x {r[2] / max(1, r[1]):7.2f} us/call  {r[0]}")
