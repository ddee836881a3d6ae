import sys, time
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_batch=512, n_threads=2, logits_all=False, verbose=False)
for n in (64, 512):
    best = 1e9
    for s in range(3):
        llm.reset(); p = [(7 * i + s) % 4000 + 3 for i in range(n)]
        t = time.perf_counter(); llm.eval(p); best = min(best, time.perf_counter() - t)
    print(f"llama.cpp: prompt {n} {best * 1e3:.1f} ms ({n / best:.0f} tok/s)")
