"""One stream of the small Qwen4-Exp GGUF (README) on the CPU: a 64-token prompt and 160 greedy tokens, twice, without
speculation and with MTP drafts (k = 2) from its random head, which never matches; the outputs must be equal.

    python mtp_overhead.py FILE
"""

import sys
import time

from strata import LLM, SamplingParams

path = sys.argv[1]
params = SamplingParams(temperature=0.0, max_tokens=160, ignore_eos=True)
prompt = [{"prompt_token_ids": [(7 * i) % 4000 + 3 for i in range(64)]}]
tokens = {}
for config in (None, {"method": "mtp", "num_speculative_tokens": 2}):
    llm = LLM(path, device="cpu", max_num_seqs=2, max_model_len=2048, speculative_config=config)
    llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4))  # warm-up
    for r in range(2):
        started = time.perf_counter()
        out = llm.generate(prompt, params)
        print(f"{config} round {r + 1}: {time.perf_counter() - started:.2f} s", flush=True)
    tokens[str(config)] = out[0].outputs[0].token_ids
    del llm
print("same tokens:", len(set(map(tuple, tokens.values()))) == 1)
