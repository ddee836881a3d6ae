"""bf16 fused_moe at prompt sizes (16-128 tokens) on Qwen3-Next's expert shape (512 experts of 512, top 10): the
default tiling against a sweep, in CUDA graphs (2 rotated routings; a layer's experts are 3.2 GB, so cold).
Prints us a call and GB/s over the experts actually read. Writes $OUT/moe_prompt_tiles.json."""
import itertools
import json
import os

import torch

from graph_timing import graph_time
from strata.kernels.fused_moe import default_config, fused_moe

experts, dim, inter, top_k = 512, 2048, 512, 10
w13 = torch.randn(experts, 2 * inter, dim, device="cuda", dtype=torch.bfloat16) * 0.02
w2 = torch.randn(experts, dim, inter, device="cuda", dtype=torch.bfloat16) * 0.02
out = {}
for t in (16, 32, 64, 128):
    x = torch.randn(t, dim, device="cuda", dtype=torch.bfloat16)
    ids = [torch.stack([torch.randperm(experts, device="cuda")[:top_k] for _ in range(t)]) for _ in range(2)]
    wts = torch.softmax(torch.randn(t, top_k, device="cuda"), -1).to(torch.bfloat16)
    distinct = sum(i.unique().numel() for i in ids) / 2
    gb = distinct * 3 * dim * inter * 2 / 1e9
    res = {"default": graph_time(lambda i: fused_moe(x, w13, w2, ids[i], wts), 2)}
    for bm, bn, bk, warps, stages in itertools.product((16, 32), (32, 64, 128), (64, 128), (4,), (2, 3, 4)):
        cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)
        try:
            res[str((bm, bn, bk, warps, stages))] = graph_time(
                lambda i: fused_moe(x, w13, w2, ids[i], wts, config=cfg), 2)
        except Exception:  # noqa: BLE001 (a tiling over the shared memory)
            pass
    best = sorted((v, k) for k, v in res.items())[:5]
    out[t] = {"distinct": distinct, "gb": gb, "default_cfg": default_config(t * top_k, experts), "res": res}
    print("T", t, "experts read", distinct, f"{gb:.3f} GB", "default", round(res["default"], 1), "us",
          f"{gb / res['default'] * 1e6:.0f} GB/s", "best",
          [(round(v, 1), k, f"{gb / v * 1e6:.0f} GB/s") for v, k in best], flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "moe_prompt_tiles.json"), "w"), indent=1)
