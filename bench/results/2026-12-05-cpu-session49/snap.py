"""quant_moe outputs on fixed random inputs, for a before/after bit comparison: snap.py OUT.npz"""
import sys
import numpy as np, torch
from gguf import GGMLQuantizationType as Q
from strata.kernels import cpu_quant
from strata.weights.quantize import quantize
torch.manual_seed(0); rng = np.random.default_rng(0)
res = {}
for (q13, q2, D, I, E) in [(Q.Q4_K, Q.Q6_K, 512, 256, 16), (Q.Q4_0, Q.Q8_0, 256, 96, 8), (Q.Q4_K, Q.Q5_0, 256, 160, 8)]:
    w13 = torch.stack([quantize(torch.randn(2 * I, D) * 0.05, q13) for _ in range(E)])
    w2 = torch.stack([quantize(torch.randn(D, I) * 0.05, q2) for _ in range(E)])
    for R, K in [(1, 6), (3, 4), (37, 8), (200, 8)]:
        hidden = torch.randn(R, D)
        rows = np.repeat(np.arange(R), K).astype(np.int64)
        experts = np.concatenate([rng.choice(E, K, replace=False) for _ in range(R)]).astype(np.int64)
        weights = rng.random(R * K).astype(np.float32)
        for threads in (1, 2, 3, 5):
            out = torch.zeros(R, D)
            cpu_quant.quant_moe(hidden, rows, experts, weights, w13, int(q13), w2, int(q2), I, out, num_threads=threads)
            res[f"{q13.name}_{q2.name}_{R}_{K}_{threads}"] = out.numpy().copy()
np.savez(sys.argv[1], **res)
print(len(res), "outputs")
