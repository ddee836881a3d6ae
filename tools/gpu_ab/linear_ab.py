"""skinny_linear against cuBLAS (F.linear) for one-row bf16 GEMVs of the hybrid shapes, inside CUDA graphs, weights rotated."""
import torch
import torch.nn.functional as F
from graph_timing import graph_time
from strata.kernels.skinny_linear import skinny_linear
for name, n, k in [("next_qkvz", 12288, 2048), ("next_ba", 64, 2048), ("next_out", 2048, 4096), ("shared_gu", 1024, 2048),
                   ("shared_down", 2048, 512), ("shared_gate", 1, 2048), ("attn_qkv", 9216, 2048), ("attn_o", 2048, 4096),
                   ("q4e_qkvz", 12288, 2560), ("q4e_out", 2560, 4096)]:
    copies = max(2, min(32, int(1.0e9 // (n * k * 2))))
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    res = {}
    for arm, fn in (("cublas", lambda i: F.linear(x, ws[i])), ("skinny", lambda i: skinny_linear(x, ws[i])),
                    ("skinny_n4", lambda i: skinny_linear(x, ws[i], config=dict(BLOCK_N=4, BLOCK_K=1024, num_warps=4, num_stages=4))),
                    ("skinny_n8k512", lambda i: skinny_linear(x, ws[i], config=dict(BLOCK_N=8, BLOCK_K=512, num_warps=4, num_stages=4)))):
        t = graph_time(fn, copies); res[arm] = (round(t, 2), round(n * k * 2 / t / 1e3))
    print(name, n, k, res, flush=True)
    del ws
