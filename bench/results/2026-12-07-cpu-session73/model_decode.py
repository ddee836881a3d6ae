"""One stream of a GGUF on the CPU: a 64-token prompt's 1-token generate and its 65-token generate, best of 3; decode
ms a token from their difference, and the first tokens. Run from each tree (PYTHONPATH) in turn for an A/B.

    python model_decode.py FILE
"""
import sys
import time

from strata import LLM, SamplingParams

llm = LLM(sys.argv[1], device="cpu", max_num_seqs=1, max_model_len=2048, enable_prefix_caching=False)
prompt = {"prompt_token_ids": [(7 * i) % 4000 + 3 for i in range(64)]}
one, many = (SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (1, 65))
llm.generate([prompt], many)
best = 1e9
for _ in range(3):
    started = time.perf_counter()
    llm.generate([prompt], one)
    first = time.perf_counter() - started
    started = time.perf_counter()
    out = llm.generate([prompt], many)
    best = min(best, (time.perf_counter() - started - first) / 64)
print(f"decode {best * 1e3:.2f} ms a token ({1 / best:.1f} tok/s), tokens {out[0].outputs[0].token_ids[:8]}")
