"""cpu_quant.quant_moe's Python argument checks (`_check_moe`), once per offloaded layer on the host part's path:
before aca8303 (numpy min/max range checks of the pairs' rows and experts in Python) against after (those ranges
checked in C), one row and 6 pairs of the 30B-A3B's expert shape, each arm's min over 7 rounds of 5,000 calls,
alternated. The "before" function is read from the file at aca8303^ (its path the first argument).
usage: .venv/bin/python bench/results/2026-12-04-cpu-session42/check_moe.py /tmp/cpu_quant_before.py"""
import importlib.util
import sys
import time

import numpy as np
import torch

from strata.kernels import cpu_quant

spec = importlib.util.spec_from_file_location("cpu_quant_before", sys.argv[1])
before = importlib.util.module_from_spec(spec)
spec.loader.exec_module(before)
E, D, I = 128, 2048, 768
w13 = torch.zeros(E, 2 * I, D // 256 * 144, dtype=torch.uint8)
w2 = torch.zeros(E, D, I // 256 * 210, dtype=torch.uint8)
hidden, out = torch.zeros(1, D), torch.zeros(1, D)
rows = np.zeros(6, dtype=np.int64)
experts = np.array([3, 17, 40, 77, 90, 101], dtype=np.int64)
weights = np.full(6, 0.1, np.float32)
arms = {"before": before._check_moe, "after": cpu_quant._check_moe}
best = {name: float("inf") for name in arms}
for _ in range(7):
    for name, check in arms.items():
        started = time.perf_counter()
        for _ in range(5000):
            check(hidden, rows, experts, weights, w13, 12, w2, 14, I, out)
        best[name] = min(best[name], (time.perf_counter() - started) / 5000 * 1e6)
print(", ".join(f"{name} {us:.1f} us a call" for name, us in best.items()))
