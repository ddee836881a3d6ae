"""Single-thread quant_matmul at one row, warm (weights in L2/L3): us per call for Q4_K 1536x2048 and Q6_K 2048x768."""
import sys, time, numpy as np, torch
from gguf import GGMLQuantizationType as Q
from strata.kernels import cpu_quant
from strata.weights.quantize import quantize
cpu_quant.set_num_threads(1)
torch.manual_seed(0)
cases = [("q4_k gate/up", Q.Q4_K, 1536, 2048), ("q6_k down", Q.Q6_K, 2048, 768)]
ws = [(name, int(q), n, k, quantize(torch.randn(n, k) * 0.02, q).contiguous()) for name, q, n, k in cases]
x = {k: torch.randn(1, k) for _, _, _, k, _ in ws}
res = []
for name, q, n, k, w in ws:
    y = torch.empty(1, n)
    for _ in range(20): cpu_quant.quant_matmul(x[k], w, q, n, k, out=y)
    ts = []
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 300):
        t = time.perf_counter(); cpu_quant.quant_matmul(x[k], w, q, n, k, out=y); ts.append(time.perf_counter() - t)
    res.append(f"{name} min {min(ts)*1e6:.0f} med {np.median(ts)*1e6:.0f} us")
print("; ".join(res))
