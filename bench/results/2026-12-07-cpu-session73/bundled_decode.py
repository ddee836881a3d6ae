"""The bundled model (SmolLM2-135M Q4_1) on the CPU, one stream: a 64-token prompt's 1-token generate and 65-token
generate, best of 3; decode ms a token from their difference; the first tokens."""
import time
from strata import LLM, SamplingParams
llm = LLM(max_num_seqs=1, enable_prefix_caching=False)
prompt = {"prompt_token_ids": [(7 * i) % 4000 + 3 for i in range(64)]}
one, many = (SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (1, 65))
llm.generate([prompt], many)
best = 1e9
for _ in range(3):
    t = time.perf_counter(); llm.generate([prompt], one); first = time.perf_counter() - t
    t = time.perf_counter(); out = llm.generate([prompt], many); total = time.perf_counter() - t
    best = min(best, (total - first) / 64)
print(f"decode {best * 1e3:.2f} ms a token ({1 / best:.1f} tok/s), tokens {out[0].outputs[0].token_ids[:8]}")
