"""One-row and 8-row Q4_K / Q5_K / Q6_K products, AVX2 table against AVX-512, one thread, warm and cold, alternated."""
import time, torch, numpy as np
from strata.kernels import cpu_quant
SB = {12: (144, (1, 3)), 13: (176, (1, 3)), 14: (210, (209,))}
def blocks(qtype, n, k, count):
    sb, dpos = SB[qtype]
    b = torch.randint(0, 256, (count, n, k // 256 * sb), dtype=torch.uint8)
    v = b.view(count, n, k // 256, sb)
    for p in dpos: v[..., p] = 0x10
    return b
cpu_quant.set_num_threads(1)
for qtype, n, k in ((12, 1536, 2048), (13, 1536, 2048), (14, 2048, 768)):
    count = int(__import__("os").environ.get("COUNT", 64))
    w = blocks(qtype, n, k, count)
    for rows in (1, 4, 8):
        x = torch.randn(rows, k)
        res = {}
        for rnd in range(3):
            for isa in ("avx2", "avx512"):
                cpu_quant.set_isa(isa)
                for e in range(4): cpu_quant.quant_matmul(x, w[e % count], qtype, n, k)
                t = time.perf_counter()
                for e in range(max(count, 32)): cpu_quant.quant_matmul(x, w[e % count], qtype, n, k)
                res.setdefault(isa, []).append((time.perf_counter() - t) / max(count, 32) * 1e6)
        print(f"type {qtype} {n}x{k} rows {rows}: " + "  ".join(f"{i} {min(v):.0f} us ({w[0].numel()/min(v)/1e3:.1f} GB/s)" for i, v in res.items()))
