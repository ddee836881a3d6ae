"""Decode time of the bundled model (smollm2-135m, CPU, float32) at a given torch thread count, through the LLM API.

usage: python run.py THREADS   -> one JSON line: threads, load_s, and the seconds of 3 greedy 48-token requests
"""

import json
import sys
import time

from strata.engine.llm import LLM
from strata.types import SamplingParams

threads = int(sys.argv[1])
start = time.perf_counter()
llm = LLM(device="cpu", torch_threads=threads)
load_s = time.perf_counter() - start
params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
llm.generate("The capital of France is", SamplingParams(max_tokens=4))  # warm-up
times, tokens = [], []
for _ in range(3):
    start = time.perf_counter()
    out = llm.generate("Write a short story about a robot who learns to paint.", params)[0]
    times.append(round(time.perf_counter() - start, 3))
    tokens.append(len(out.outputs[0].token_ids))
print(json.dumps({"threads": threads, "load_s": round(load_s, 2), "request_s": times, "tokens": tokens}))
