"""One call of a packed-MoE path at a prompt's size, for Nsight Compute (`ncu --profile-from-start off`): the
30B-A3B's experts (128 of 768, top 8, Q4_K gate/up, Q6_K down) at TOKENS tokens (512). argv[1]: grouped (packed_moe's
float grouped kernels, its tiling), mmq (packed_mmq at its CONFIG, or MMQ_CONFIG's dict) or pairs (packed_q8's
decode pairs at their tiling for TOKENS: TOKENS=1 is a one-stream decode step's MoE). Compiles and
warms first, then profiles one call between cudaProfilerStart / Stop."""
import os
import sys

import torch

from strata.kernels import packed_mmq, packed_moe, packed_q8
from expert_blocks import blocks

E, D, I, TOP = 128, 2048, 768, 8
tokens = int(os.environ.get("TOKENS", "512"))
w13 = blocks(12, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
w2 = blocks(14, E * D, I, seed=2).cuda().view(E, D, -1)
g = torch.Generator().manual_seed(0)
ids = torch.stack([torch.randperm(E, generator=g)[:TOP] for _ in range(tokens)]).cuda()
wts = torch.rand(tokens, TOP, device="cuda")
hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
if sys.argv[1] == "grouped":
    run = lambda: packed_moe._grouped(hidden, w13, 12, w2, 14, ids, wts)
elif sys.argv[1] == "pairs":
    run = lambda: packed_q8.moe_pairs_q8(hidden, w13, 12, w2, 14, ids, wts)
else:
    cfg = {**packed_mmq.CONFIG, **eval(os.environ.get("MMQ_CONFIG", "{}"))}
    run = lambda: packed_mmq.moe_grouped_q8(hidden, w13, 12, w2, 14, ids, wts, config=cfg)
for _ in range(3):
    run()
torch.cuda.synchronize()
torch.cuda.profiler.start()
run()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
