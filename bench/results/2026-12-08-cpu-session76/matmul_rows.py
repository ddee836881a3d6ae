"""int8 (quant_matmul) vs exact float (dequant_matmul) at prompt row counts."""
import time, torch, sys
from strata.kernels import cpu_quant
# type: (block bytes, block values, f16 positions to fix)
T = {"Q4_1": (3, 20, 32, (1, 3)), "Q8_0": (8, 34, 32, (1,)), "Q4_K": (12, 144, 256, (1, 3)), "Q6_K": (14, 210, 256, (209,))}
def blocks(name, n, k):
    q, sb, bv, dpos = T[name]
    b = torch.randint(0, 256, (n, k // bv * sb), dtype=torch.uint8)
    v = b.view(n, k // bv, sb)
    for p in dpos: v[..., p] = 0x10
    return b
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
cpu_quant.set_num_threads(threads)
for name, n, k in (("Q4_1", 1536, 576), ("Q8_0", 1536, 576), ("Q4_K", 2048, 2048), ("Q6_K", 2048, 2048)):
    w = blocks(name, n, k); q = T[name][0]
    for rows in (16, 64, 512):
        x = torch.randn(rows, k)
        res = {}
        for rnd in range(3):
            for arm, f in (("int8", cpu_quant.quant_matmul), ("exact", cpu_quant.dequant_matmul)):
                if arm == "exact" and not cpu_quant.supports_dequant(q): continue
                f(x, w, q, n, k)
                reps = max(2, int(2e8 / (rows * n * k)))
                t = time.perf_counter()
                for _ in range(reps): f(x, w, q, n, k)
                res.setdefault(arm, []).append((time.perf_counter() - t) / reps)
        print(f"{name} {n}x{k} rows {rows} threads {threads}: " + "  ".join(f"{a} {min(v)*1e3:.2f} ms ({rows*n*k/min(v)/1e9:.0f} GMAC/s)" for a, v in res.items()), flush=True)
