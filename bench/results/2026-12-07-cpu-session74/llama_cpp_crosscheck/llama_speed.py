"""llama.cpp (llama-cpp-python) one stream on the CPU: a 64-token prompt, then 64 greedy tokens one at a time;
best of 3 rounds: prompt ms (every row's logits computed: logits_all) and decode ms a token. FILE [THREADS]"""
import sys, time
import numpy as np
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_batch=512, n_threads=int(sys.argv[2]) if len(sys.argv) > 2 else 2,
            logits_all=True, verbose=False)  # scores rows are filled only with logits_all
prompt = [(7 * i) % 4000 + 3 for i in range(64)]
best_p = best_d = 1e9
for _ in range(3):
    llm.reset()
    t0 = time.perf_counter(); llm.eval(prompt); t1 = time.perf_counter()
    toks = []
    for _ in range(64):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1])); toks.append(tok); llm.eval([tok])
    t2 = time.perf_counter()
    best_p, best_d = min(best_p, t1 - t0), min(best_d, (t2 - t1) / 64)
print(f"llama.cpp: prompt 64 {best_p * 1e3:.1f} ms, decode {best_d * 1e3:.2f} ms a token ({1 / best_d:.1f} tok/s), "
      f"tokens {toks[:8]}")
