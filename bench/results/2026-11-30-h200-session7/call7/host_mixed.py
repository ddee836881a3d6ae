"""Device-only: where the host time of eager mixed steps (a 64-token prompt admitted beside running
decodes) goes: cProfile over a run whose admissions are staggered (graphs on for pure decode steps)."""
import cProfile, pstats, sys, time
import torch
from strata import LLM, SamplingParams

model = sys.argv[1] if len(sys.argv) > 1 else "random:qwen3-30b-a3b?num_hidden_layers=24"
llm = LLM(model, dtype="bfloat16", device="cuda", max_num_seqs=4, max_model_len=2048, quiet=True)
prompts = [{"prompt_token_ids": list(range(1000 + 64 * i, 1064 + 64 * i))} for i in range(12)]
params = [SamplingParams(temperature=0.0, max_tokens=20 + 13 * i, ignore_eos=True) for i in range(12)]
llm.generate(prompts, params)
runner = llm.engine.runner
calls = {"n": 0, "t": 0.0}
real_model_call = runner.model.forward
def timed(*a, **k):
    t = time.perf_counter(); out = real_model_call(*a, **k); torch.cuda.synchronize()
    calls["n"] += 1; calls["t"] += time.perf_counter() - t
    return out
runner.model.forward = timed
torch.cuda.synchronize(); t = time.perf_counter(); llm.generate(prompts, params); torch.cuda.synchronize()
print(f"run {time.perf_counter() - t:.3f} s; eager forwards {calls['n']}, {1e3 * calls['t'] / max(1, calls['n']):.1f} ms each incl. device")
runner.model.forward = real_model_call
prof = cProfile.Profile()
prof.enable(); llm.generate(prompts, params); torch.cuda.synchronize(); prof.disable()
st = pstats.Stats(prof); st.sort_stats("tottime").print_stats(30)
st.sort_stats("cumulative").print_stats(45)
