"""In-process A/B: the native CPU attention kernel against the torch batch, arms alternated."""
import statistics, sys, time
import numpy as np
from strata import LLM, SamplingParams
from strata.model import ops
streams, tokens, rounds = map(int, sys.argv[1:4])
llm = LLM("smollm2-135m", device="cpu", max_model_len=1024)
rng = np.random.default_rng(0)
prompts = [{"prompt_token_ids": rng.integers(100, 40000, int(sys.argv[4]) if len(sys.argv) > 4 else 64).tolist()} for _ in range(streams)]
llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
native = ops._cpu_attention
arms = {"native": native, "torch": lambda: None}
times = {a: [] for a in arms}
outs = {}
for r in range(rounds):
    for name, fn in arms.items():
        ops._cpu_attention = fn
        t = time.perf_counter()
        out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
        times[name].append((time.perf_counter() - t) / tokens * 1e3)
        outs[name] = [o.outputs[0].token_ids for o in out]
for name, ts in times.items():
    print(f"{streams} streams {name}: step ms {' '.join(f'{t:.1f}' for t in ts)}  median {statistics.median(ts):.1f} -> {streams * 1e3 / statistics.median(ts):.1f} tok/s")
print("same tokens:", outs["native"] == outs["torch"])
