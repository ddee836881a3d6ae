import torch, time
from strata.kernels import cpu_attention
H, Hkv, D, B = 9, 3, 64, 16
k = torch.randn(64, B, Hkv, D); v = torch.randn(64, B, Hkv, D)
for S, ctx in ((8, 1), (8, 100), (1, 100), (4, 250)):
    W = (ctx + B - 1) // B
    tables = torch.arange(S * W, dtype=torch.int64).reshape(S, W)
    seq_lens = torch.full((S,), ctx, dtype=torch.int64); qsl = torch.arange(S + 1, dtype=torch.int64); q = torch.randn(S, H, D)
    f = lambda: cpu_attention.paged_attention(q, k, v, tables, seq_lens, qsl, 0.125, context_tokens=S * ctx)
    for _ in range(200): f()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(1000): f()
        best = min(best, (time.perf_counter() - t) / 1000 * 1e6)
    print(S, ctx, round(best, 1), "us")
