"""A/B of built quant_matmul libraries on dequant_matmul, Q4_1 weights of SmolLM2-135M's projection shapes, one
thread timed by its CPU time (time.thread_time: the shared VM's other work does not count), best of 5, the
libraries alternated twice and the better of the two kept.
usage: python micro.py LIB_A.so,LIB_B.so 1,2,4,8,16,64 [threads]  (threads > 1: wall time instead)"""
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import quantize

from strata.kernels import cpu_quant as cq

libs, sizes = sys.argv[1].split(","), [int(t) for t in sys.argv[2].split(",")]
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1


def load(path):
    cq._library = cq._failed = None
    cq.build_library = lambda *a, **k: Path(path)
    cq._load()
    return cq._library


loaded = [load(p) for p in libs]
rng = np.random.default_rng(0)
shapes = [(192, 576), (1536, 576), (576, 1536), (8192, 576)]
weights = {s: torch.from_numpy(quantize(rng.standard_normal(s).astype(np.float32), Q.Q4_1)) for s in shapes}
cq.set_num_threads(threads)
clock = time.thread_time if threads == 1 else time.perf_counter


def best(f, reps):
    f()
    times = []
    for _ in range(5):
        t = clock()
        for _ in range(reps):
            f()
        times.append((clock() - t) / reps)
    return min(times)


for t in sizes:
    for (n, k), w in weights.items():
        x = torch.randn(t, k)
        rates = {}
        for _ in range(2):
            for i, lib in enumerate(loaded):
                cq._library = lib
                seconds = best(lambda: cq.dequant_matmul(x, w, 3, n, k), max(2, 20_000_000 // (n * k * t)))
                rates.setdefault(i, []).append(n * k * t / seconds / 1e9)
        print(f"T {t:3d} threads {threads} {n}x{k} " + "  ".join(f"lib{i}: {max(v):5.1f} GMAC/s" for i, v in rates.items()),
              flush=True)
