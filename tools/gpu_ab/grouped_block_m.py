"""packed_moe's float grouped kernels at BLOCK_M 16 against 64 (one row block an expert up to 64 rows: each used
expert decoded once) at prompt sizes where the default takes 16, on the 30B-A3B (128 experts of 768, top 8, Q4_K /
Q6_K) and Qwen4-Exp (512 of 640, top 10, Q4_K / Q8_0) shapes, in CUDA graphs with 4 rotated routings."""
import sys

import torch

from strata.kernels import packed_moe

sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from expert_blocks import blocks  # noqa: E402
from graph_timing import graph_time  # noqa: E402


gen = torch.Generator().manual_seed(0)
for shape, (E, D, I, TOP, q13, q2), token_counts in [("30b", (128, 2048, 768, 8, 12, 14), (96, 128, 192, 256)),
                                                    ("qwen4exp", (512, 2560, 640, 10, 12, 8), (256, 512, 768))]:
    w13 = blocks(q13, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
    w2 = blocks(q2, E * D, I, seed=2).cuda().view(E, D, -1)
    for tokens in token_counts:
        hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
        ids = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(4)]
        wts = torch.rand(tokens, TOP, device="cuda")
        res = {}
        for bm in (16, 64):
            cfg = dict(BLOCK_M=bm)
            res[bm] = round(graph_time(lambda i, c=cfg: packed_moe._grouped(hidden, w13, q13, w2, q2, ids[i], wts,
                                                                          config=c), 4), 1)
        same = torch.equal(packed_moe._grouped(hidden, w13, q13, w2, q2, ids[0], wts, config=dict(BLOCK_M=16)),
                           packed_moe._grouped(hidden, w13, q13, w2, q2, ids[0], wts, config=dict(BLOCK_M=64)))
        print(f"{shape} {tokens} tokens ({tokens * TOP / E:.1f} pairs an expert): BLOCK_M 16 {res[16]} us, "
              f"64 {res[64]} us, same bits {same}", flush=True)
