"""Device-only: where the host time of an eager step goes (cProfile), single stream, 8-token prompt."""
import cProfile, pstats, sys, time
import torch
from strata import LLM, SamplingParams

model = sys.argv[1] if len(sys.argv) > 1 else "random:qwen3-30b-a3b?num_hidden_layers=24"
llm = LLM(model, dtype="bfloat16", device="cuda", max_num_seqs=4, max_model_len=2048, quiet=True)
params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
prompt = [{"prompt_token_ids": list(range(1000, 1064))}]
llm.engine.runner.use_cuda_graphs = False
llm.generate(prompt, params)
torch.cuda.synchronize(); t = time.perf_counter(); llm.generate(prompt, params); torch.cuda.synchronize()
print(f"eager wall per token {1e3 * (time.perf_counter() - t) / 32:.2f} ms")
prof = cProfile.Profile()
prof.enable(); llm.generate(prompt, params); torch.cuda.synchronize(); prof.disable()
st = pstats.Stats(prof); st.sort_stats("tottime").print_stats(28)
st.sort_stats("cumulative").print_stats(40)
