"""The CPU expert kernel (cpu_quant.quant_moe, 30B-A3B expert shapes: Q4_K gate/up of 2,048, Q6_K down of 768; 6
pairs of one row, as an offloaded layer's host part at one stream with 25 % of the experts on the GPU) timed right
after the host part's own preparation of its hidden rows: converting the whole 32-row exchange buffer to float32
(what `OffloadedExperts._host_part` did: torch's threads take a copy of 64K values, then spin while the kernel's
threads need the cores) against converting only the real row, or nothing. 2 threads each, this VM's 2 cores.
usage: PYTHONPATH=. python host_part_contention.py"""
import time

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from strata.kernels import cpu_quant

torch.set_num_threads(2)
D, I, E = 2048, 768, 32
rng = np.random.default_rng(0)


def blocks(qtype, n, k):
    per, nbytes = GGML_QUANT_SIZES[qtype]
    return torch.from_numpy(rng.integers(0, 256, (E, n, k // per * nbytes), dtype=np.uint8))


w13, w2 = blocks(Q.Q4_K, 2 * I, D), blocks(Q.Q6_K, D, I)
exchange = torch.randn(32, D).to(torch.bfloat16)       # the pinned exchange buffer's rows (max_slots x window)
kept = torch.empty(32, D)
out = torch.zeros(32, D)
rows = np.zeros(6, dtype=np.int64)
experts = rng.choice(E, 6, replace=False).astype(np.int64)
weights = np.full(6, 0.1, dtype=np.float32)
for rounds in range(2):
    for mode in ("whole buffer (before)", "real rows (now)", "nothing"):
        times = []
        for _ in range(60):
            if mode.startswith("whole"):
                hidden = exchange.float().contiguous()
            elif mode.startswith("real"):
                hidden = exchange[:1].float().contiguous()
            else:
                hidden = kept[:1]
            target = out[:hidden.shape[0]]
            start = time.perf_counter()
            cpu_quant.quant_moe(hidden, rows, experts, weights, w13, int(Q.Q4_K), w2, int(Q.Q6_K), I, target,
                                num_threads=2)
            times.append(time.perf_counter() - start)
        print(f"{mode}: quant_moe {np.median(times) * 1e6:.0f} us (median of 60)", flush=True)
