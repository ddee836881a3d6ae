"""Microbenchmark: cpu_quant.quant_matmul / dequant_matmul on a [N=5632, K=2048] weight, T = 1 and 8, one thread."""
import sys, time
import numpy as np, torch
sys.path.insert(0, "tests/kernels")
from gguf import GGMLQuantizationType as Q
from test_cpu_quant import make_blocks
from strata.kernels import cpu_quant

n, k = 5632, 2048
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
names = sys.argv[2].split(",") if len(sys.argv) > 2 else ["Q4_K", "Q2_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
cpu_quant.set_num_threads(threads)
torch.set_num_threads(1)
for name in names:
    qtype = Q[name]
    w = make_blocks(qtype, n, k, "random", seed=1)
    row = []
    for t in (1, 8):
        x = torch.randn(t, k)
        for fn in (cpu_quant.quant_matmul, cpu_quant.dequant_matmul):
            out = torch.empty(t, n)
            for _ in range(3): fn(x, w, qtype, n, k, out=out)
            times = []
            for _ in range(150 if t == 1 else 60):
                start = time.perf_counter()
                fn(x, w, qtype, n, k, out=out)
                times.append(time.perf_counter() - start)
            best = float(np.percentile(times, 10))
            row.append(f"{best * 1e6:7.0f}")
    print(f"{name:8s} int8 T=1 {row[0]} us  exact T=1 {row[1]} us  int8 T=8 {row[2]} us  exact T=8 {row[3]} us", flush=True)
