"""In-process A/B of two built kernel libraries on the engine: one LLM (bundled SmolLM2 Q4_1, float32, CPU),
its native library switched between generates (arms alternated, ROUNDS rounds), each generate S streams x N
greedy tokens of 64-token random prompts already in the prefix cache (decode steps only). Reports per arm the
main thread's CPU seconds per decode step (what the scheduler's other work on a shared VM does not inflate
much), of which in dequant_matmul, the wall seconds, and whether the tokens equal the other arm's.
usage: python inproc.py LIB_A.so,LIB_B.so STREAMS TOKENS ROUNDS THREADS (0: cpu_quant's default)"""
import hashlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from strata import LLM, SamplingParams
from strata.kernels import cpu_quant

libs, streams, tokens, rounds, threads = sys.argv[1].split(","), *map(int, sys.argv[2:6])
llm = LLM("smollm2-135m", device="cpu", max_model_len=1024)
loaded = []
for path in libs:
    cpu_quant._library = cpu_quant._failed = None
    cpu_quant.build_library = lambda *a, _p=path, **k: Path(_p)
    loaded.append(cpu_quant._load())
if threads:
    cpu_quant.set_num_threads(threads)
rng = np.random.default_rng(0)
prompts = [{"prompt_token_ids": rng.integers(100, 40000, 64).tolist()} for _ in range(streams)]
llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))  # prompts cached
matmul = [0.0]
kernel = cpu_quant.dequant_matmul


def timed(*args):
    t = time.thread_time()
    y = kernel(*args)
    matmul[0] += time.thread_time() - t
    return y


cpu_quant.dequant_matmul = timed
rows = {i: [] for i in range(len(libs))}
for _ in range(rounds):
    for i, lib in enumerate(loaded):
        cpu_quant._library = lib
        matmul[0] = 0.0
        wall, cpu = time.perf_counter(), time.thread_time()
        out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        digest = hashlib.md5(str([o.outputs[0].token_ids for o in out]).encode()).hexdigest()[:8]
        rows[i].append((cpu / tokens * 1e3, matmul[0] / tokens * 1e3, wall / tokens * 1e3, digest))
        print(f"lib{i} {Path(libs[i]).name}: step cpu {rows[i][-1][0]:.1f} ms (matmul {rows[i][-1][1]:.1f}), "
              f"wall {rows[i][-1][2]:.1f} ms, tokens {digest}", flush=True)
for i, r in rows.items():
    print(f"median lib{i}: step cpu {statistics.median(x[0] for x in r):.1f} ms, matmul "
          f"{statistics.median(x[1] for x in r):.1f} ms, wall {statistics.median(x[2] for x in r):.1f} ms "
          f"-> {streams * 1e3 / statistics.median(x[2] for x in r):.1f} tok/s wall")
