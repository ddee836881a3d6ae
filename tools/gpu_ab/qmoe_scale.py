"""cpu_quant.quant_moe on this host's cores: one row's pairs of the 30B-A3B's experts (Q4_K gate/up of 2,048, Q6_K down
of 768) drawn from 128 experts (cold: ~390 MB, beyond the caches) or the same ones again (warm), at several thread
counts: GB/s of expert bytes; with isa=avx2,avx512 each count's runs once a kernel table, in turn (session 73: the
AVX-512 table's K-quants on 512-bit vectors). usage: qmoe_scale.py [experts=128] [threads=1,2,4,8,12,14,15,16]
[pairs=6] [isa=NAME,...]"""
import sys
import time

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from strata.kernels import cpu_quant
from strata.weights.quantize import quantize

opts = dict(a.split("=") for a in sys.argv[1:])
D, I, E = 2048, 768, int(opts.get("experts", 128))
rng = np.random.default_rng(0)


def blocks(qtype, n, k):
    """E experts' [n, k] weights as GGUF blocks: 4 quantized from Gaussian values (random bytes would hold infinite
    and subnormal float16 scales), repeated in distinct memory."""
    distinct = torch.stack([quantize(torch.randn(n, k) * 0.02, qtype) for _ in range(4)])
    return distinct.repeat((E + 3) // 4, 1, 1)[:E].contiguous()


w13, w2 = blocks(Q.Q4_K, 2 * I, D), blocks(Q.Q6_K, D, I)
per_expert = w13[0].numel() + w2[0].numel()
hidden, out = torch.randn(1, D), torch.zeros(1, D)
isas = opts.get("isa", cpu_quant.isa()).split(",")
for threads in [int(t) for t in opts.get("threads", "1,2,4,8,12,14,15,16").split(",")]:
    for pairs, isa, mode in [(int(p), isa, mode) for p in opts.get("pairs", "6").split(",") for isa in isas
                             for mode in ("cold", "warm")]:
        cpu_quant.set_isa(isa)
        times = []
        for _ in range(60):
            experts = rng.choice(E, pairs, replace=False) if mode == "cold" else np.arange(pairs)
            start = time.perf_counter()
            cpu_quant.quant_moe(hidden, np.zeros(pairs, dtype=np.int64), experts.astype(np.int64),
                                np.full(pairs, 0.1, dtype=np.float32), w13, int(Q.Q4_K), w2, int(Q.Q6_K), I, out,
                                num_threads=threads)
            times.append(time.perf_counter() - start)
        us = np.median(times[5:]) * 1e6
        p90 = np.percentile(times[5:], 90) * 1e6
        print(f"threads {threads} pairs {pairs} {isa} {mode}: {us:.0f} us (p90 {p90:.0f}), "
              f"{pairs * per_expert / us / 1e3:.1f} GB/s", flush=True)
