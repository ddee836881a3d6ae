"""fused_moe tile configs at 8 / 16 / 32 tokens on Qwen3-Next's and Qwen4-Exp's expert shapes (bf16), in CUDA graphs, weights cold."""
import itertools
import torch
from graph_timing import graph_time
from strata.kernels.fused_moe import fused_moe, default_config
for name, experts, dim, inter, top_k in [("next80", 512, 2048, 512, 10), ("q4e", 512, 2560, 640, 10)]:
    w13 = torch.randn(experts, 2 * inter, dim, device="cuda", dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(experts, dim, inter, device="cuda", dtype=torch.bfloat16) * 0.02
    for t in (8, 16, 32):
        x = torch.randn(t, dim, device="cuda", dtype=torch.bfloat16)
        ids = torch.stack([torch.randperm(experts, device="cuda")[:top_k] for _ in range(t)])
        wts = torch.softmax(torch.randn(t, top_k, device="cuda"), -1).to(torch.bfloat16)
        distinct = ids.unique().numel()
        base = default_config(t * top_k, experts)
        res = {"default": graph_time(lambda i: fused_moe(x, w13, w2, ids, wts))}
        for bm, bn, bk, warps, stages in itertools.product((16,), (32, 64, 128), (64, 128, 256), (4, 8), (3, 4)):
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)
            try:
                res[(bn, bk, warps, stages)] = graph_time(lambda i: fused_moe(x, w13, w2, ids, wts, config=cfg))
            except Exception as e:  # noqa: BLE001
                pass
        best = sorted((v, k) for k, v in res.items())[:3]
        gb = distinct * 3 * dim * inter * 2 / 1e9
        print(name, "T", t, "experts read", distinct, f"{gb:.3f} GB", "default", base, round(res["default"], 1), "us",
              f"{gb / res['default'] * 1e6:.0f} GB/s", "best", [(round(v, 1), k) for v, k in best], flush=True)
