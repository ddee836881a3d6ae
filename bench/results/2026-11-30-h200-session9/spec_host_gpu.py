"""Device-only (next session): where the host time of speculative decode steps goes at 16/32 streams on
the GPU (session 8 measured 1.56 / 3.0 ms of 'host' per speculative decode step against 0.26 / 0.45 ms
without). cProfile of a synthetic L=2.0 run, sorted by own time, plus the engine's step split."""
import cProfile, io, pstats, sys, time
from strata import LLM, SamplingParams
model = sys.argv[1] if len(sys.argv) > 1 else "random:qwen3-30b-a3b?num_hidden_layers=24"
slots = int(sys.argv[2]) if len(sys.argv) > 2 else 16
spec = {"method": "synthetic", "acceptance_length": 2.0, "num_speculative_tokens": 3}
llm = LLM(model, dtype="bfloat16", device="cuda", max_num_seqs=slots, max_model_len=4096, speculative_config=spec, quiet=True)
prompts = [{"prompt_token_ids": [(i * 7 + j) % 30000 + 100 for j in range(64)]} for i in range(slots)]
params = SamplingParams(temperature=0.0, max_tokens=96, ignore_eos=True)
llm.generate(prompts, params)
pr = cProfile.Profile()
t = time.perf_counter(); pr.enable()
llm.generate(prompts, params)
pr.disable()
print(f"wall {time.perf_counter() - t:.3f} s for {slots} x 96 tokens")
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(40); print(s.getvalue())
