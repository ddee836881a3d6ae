"""Device-only: skinny_linear's streaming variant (PROGRAMS_PER_SM) against its default tiling and cuBLAS at
one row, on qkv (5120x2048) and o_proj (2048x4096), 48 calls per graph over 8 weight copies (> L2).
Writes the best streaming config over both shapes as BN,BK,stages,pps to argv[1]."""
import itertools, sys, torch
import torch.nn.functional as F
from strata.kernels.skinny_linear import skinny_linear, DEFAULT_CONFIG
from skinny_bench_util import per_call
total = {}
for N, K in ((5120, 2048), (2048, 4096)):
    ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(8)]
    mb = N * K * 2 / 1e6
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    base = per_call(lambda i: F.linear(x, ws[i % 8]))
    dflt = per_call(lambda i: skinny_linear(x, ws[i % 8], None, DEFAULT_CONFIG))
    print(f"N={N} K={K} ({mb:.1f} MB): cublas {base:6.2f} us {mb/base:4.2f} TB/s, default {dflt:6.2f} us {mb/dflt:4.2f} TB/s", flush=True)
    for (bn, bk), pps, st in itertools.product(((2, 1024), (4, 512), (8, 256), (4, 1024), (8, 512)), (1, 2, 4), (4, 6)):
        cfg = dict(BLOCK_N=bn, BLOCK_K=bk, num_stages=st, num_warps=4, PROGRAMS_PER_SM=pps)
        try:
            t = per_call(lambda i: skinny_linear(x, ws[i % 8], None, cfg))
        except Exception as e:
            print(f"  {bn}x{bk} pps{pps} s{st}: failed {type(e).__name__}"); continue
        total[(bn, bk, st, pps)] = total.get((bn, bk, st, pps), 0) + t
        print(f"  {bn}x{bk} pps{pps} s{st}: {t:6.2f} us {mb/t:4.2f} TB/s", flush=True)
best = min((k for k in total), key=total.get)
print("best over both:", best, f"{total[best]:.2f} us")
open(sys.argv[1], "w").write(",".join(map(str, best)))
