"""One process, two builds of the native library (A: the tree's; B: /tmp/native_b), switched between generates."""
import os, statistics, sys, time
from pathlib import Path
import numpy as np
from strata import LLM, SamplingParams
from strata.kernels import cpu_attention, cpu_quant
libs = {}
for name, native in (("A", cpu_quant._NATIVE), ("B", Path("/tmp/native_b"))):
    os.environ["STRATA_CACHE_DIR"] = f"/tmp/lib{name}"
    cpu_quant._NATIVE = native
    libs[name] = cpu_quant._build()
streams, tokens, rounds, ctx = map(int, sys.argv[1:5])
cpu_quant._library = libs["A"]
llm = LLM("smollm2-135m", device="cpu", max_model_len=1024)
rng = np.random.default_rng(0)
prompts = [{"prompt_token_ids": rng.integers(100, 40000, ctx).tolist()} for _ in range(streams)]
llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
times, outs = {n: [] for n in libs}, {}
for _ in range(rounds):
    for name, lib in libs.items():
        cpu_quant._library = lib
        cpu_attention._kernel = lambda lib=lib: lib.strata_paged_attention_f32_avx2
        t = time.perf_counter()
        out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
        times[name].append((time.perf_counter() - t) / tokens * 1e3)
        outs[name] = [o.outputs[0].token_ids for o in out]
for name, ts in times.items():
    print(f"{streams}x{ctx} lib {name}: step ms {' '.join(f'{t:.1f}' for t in ts)} median {statistics.median(ts):.1f}")
print("same tokens:", outs["A"] == outs["B"])
