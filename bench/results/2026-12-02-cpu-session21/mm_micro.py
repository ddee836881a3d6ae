import time, torch, sys
sys.path.insert(0, "tests/kernels")
from test_cpu_dequant_matmul import make_blocks
from gguf import GGMLQuantizationType as Q
from strata.kernels import cpu_quant
res = []
for n, k in ((1536, 576), (576, 1536), (576, 576)):
    w = make_blocks(Q.Q4_1, n, k, seed=1)
    x = torch.randn(512, k)
    best = 1e9
    for _ in range(15):
        t = time.perf_counter(); cpu_quant.dequant_matmul(x, w, Q.Q4_1, n, k); best = min(best, time.perf_counter() - t)
    res.append(f"{n}x{k}: {best*1e3:.2f} ms {512*n*k/best/1e9:.0f} GMAC/s")
print(" | ".join(res))
