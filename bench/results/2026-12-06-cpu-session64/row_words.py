"""Host time of state_rollback.row_words over 72 (recorded, pool) pairs, as an eager roll-back of 36 Gated DeltaNet
layers checks them each step. Run from a tree's root: PYTHONPATH=. python bench/results/2026-12-06-cpu-session64/row_words.py"""
import time

import torch

from strata.kernels import state_rollback

pairs = []
for _ in range(36):
    pairs.append((torch.zeros(16, 4, 8, 8), torch.zeros(8, 4, 8, 8)))
    pairs.append((torch.zeros(16, 4, 3, 16), torch.zeros(8, 4, 3, 16)))
best = float("inf")
for _ in range(5):
    started = time.perf_counter()
    for _ in range(2000):
        [state_rollback.row_words(r, p) for r, p in pairs]
    best = min(best, (time.perf_counter() - started) / 2000 * 1e6)
print(f"row_words over {len(pairs)} pairs: {best:.0f} us (best of 5 x 2000)")
