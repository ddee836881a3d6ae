"""The offload's staging plan for one decode step's 6 missed pairs, on this host: HEAD's plain-Python
OffloadedExperts._staging_plan against the torch form it replaced (c0cd0f5's, reproduced below). us a call.
usage: .venv/bin/python bench/results/2026-12-04-cpu-session41/staging_plan.py"""
import time

import numpy as np
import torch

from strata.experts.provider import OffloadedExperts


class Slots:
    num_staging = 8


class Provider:
    slots, pcie_frac, prompt_stream_min_pairs = Slots(), 0.5, 0


def torch_plan(self, experts: torch.Tensor, num_rows: int):  # c0cd0f5's _staging_plan
    none = experts[:0], torch.full_like(experts, -1)
    used, counts = experts.unique(return_counts=True)
    order = torch.argsort(-counts, stable=True)
    used, counts = used[order], counts[order]
    take = torch.zeros_like(counts, dtype=torch.bool)
    take[:min(round(self.pcie_frac * used.numel()), self.slots.num_staging)] = True
    if not take.any():
        return none
    chosen = used[take]
    index_of = torch.full((int(used.max()) + 1,), -1, dtype=torch.long)
    index_of[chosen] = torch.arange(chosen.numel())
    return chosen, index_of[experts]


missed = np.array([5, 77, 3, 90, 11, 42], dtype=np.int64)
for name, fn, arg in (("python (HEAD)", OffloadedExperts._staging_plan, missed),
                      ("torch (c0cd0f5)", torch_plan, torch.from_numpy(missed))):
    for _ in range(200):
        fn(Provider(), arg, 1)
    n = 5000
    start = time.perf_counter()
    for _ in range(n):
        fn(Provider(), arg, 1)
    print(f"{name}: {(time.perf_counter() - start) / n * 1e6:.1f} us a call")
