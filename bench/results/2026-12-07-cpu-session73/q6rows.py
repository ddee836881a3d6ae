import time, torch
from gguf import GGMLQuantizationType as Q
from strata.kernels import cpu_quant
from strata.weights.quantize import quantize
cpu_quant.set_num_threads(1)
for qtype, n, k in ((Q.Q6_K, 4096, 2048), (Q.Q4_K, 4096, 2048)):
    w = quantize(torch.randn(n, k) * 0.02, qtype)
    for rows in (5, 6, 7, 8):
        x = torch.randn(rows, k)
        res = {}
        for r in range(5):
            for isa in ("avx2", "avx512"):
                cpu_quant.set_isa(isa)
                t = time.perf_counter()
                for e in range(16): cpu_quant.quant_matmul(x, w, int(qtype), n, k)
                res.setdefault(isa, []).append((time.perf_counter() - t) / 16 * 1e6)
        print(qtype.name, rows, {i: sorted(round(v) for v in vs)[:3] for i, vs in res.items()}, flush=True)
