"""Device-only: cuBLAS o_proj/qkv shapes at one row with the weight cold (8 copies cycled, > L2) and hot
(one copy, L2-resident): the ceiling of what pulling a weight into L2 ahead can save."""
import torch
import torch.nn.functional as F
from skinny_bench_util import per_call

for N, K in ((2048, 4096), (5120, 2048)):
    ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    cold = per_call(lambda i: F.linear(x, ws[i % 8]))
    hot = per_call(lambda i: F.linear(x, ws[0]))
    print(f"N={N} K={K}: cold {cold:.2f} us, L2-hot {hot:.2f} us")
