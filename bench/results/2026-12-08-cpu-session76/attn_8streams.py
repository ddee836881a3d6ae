"""8 decode queries (SmolLM2 heads 9 / 3 x 64) at ~100-200 tokens of context each, 30 layers' pools: us a layer."""
import time, torch
from strata.kernels import cpu_attention
B = 16
lens = [100, 130, 160, 190, 120, 150, 180, 200]
width = max(-(-n // B) for n in lens) + 1
nb = width * 8 + 2
pools = [(torch.randn(nb, B, 3, 64), torch.randn(nb, B, 3, 64)) for _ in range(30)]
tables = torch.randperm(nb)[: 8 * width].view(8, width).contiguous()
seq = torch.tensor(lens); starts = torch.arange(9)
q = torch.randn(8, 9, 64)
f = lambda kc, vc: cpu_attention.paged_attention(q, kc, vc, tables, seq, starts, 0.125)
for kc, vc in pools: f(kc, vc)
res = []
for r in range(20):
    t = time.perf_counter()
    for kc, vc in pools: f(kc, vc)
    res.append((time.perf_counter() - t) / 30)
res.sort()
print(f"8 x ~150: median {res[10]*1e6:.1f} us, best {res[0]*1e6:.1f} us a layer")
