"""One decode query (SmolLM2 heads: 9 / 3 x 64) over L keys, the native kernel: us a call and GB/s of K+V."""
import time, torch, sys
from strata.kernels import cpu_attention
B = 16
for L in (512, 4096, 8000):
    nb = -(-L // B) + 1
    # 30 layers' worth of pools so the KV is cold each call, as in a decode step
    pools = [(torch.randn(nb, B, 3, 64), torch.randn(nb, B, 3, 64)) for _ in range(30)]
    table = torch.randperm(nb)[None].long()
    q = torch.randn(1, 9, 64)
    seq = torch.tensor([L]); starts = torch.tensor([0, 1])
    f = lambda kc, vc: cpu_attention.paged_attention(q, kc, vc, table, seq, starts, 0.125)
    for kc, vc in pools: f(kc, vc)
    best = 1e9
    for r in range(5):
        t = time.perf_counter()
        for kc, vc in pools: f(kc, vc)
        best = min(best, (time.perf_counter() - t) / 30)
    print(f"L {L}: {best*1e6:.0f} us a layer, {2*L*3*64*4/best/1e9:.1f} GB/s of K+V, x30 layers {best*30e3:.1f} ms")
