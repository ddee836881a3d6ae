"""Session 61: the few-row GEMV of SPILLING types (Q6_K, Q3_K) at half the superblocks a step, against the tiling
they took before (4 rows of W, 8 superblocks, 2 warps: 255 registers and a stack on sm_90). Times, inside CUDA graphs
with rotated weights (cold L2), issue 23's joined q/k/v (Q4_K q + k, Q6_K v: 4,608 + 512 rows of 2,048) and a Q6_K /
Q3_K 4,096 x 2,048 weight alone, at 5 and 8 rows of x. Usage: joined_spill_ab.py (prints one line a case)."""
import torch
from expert_blocks import blocks
from graph_timing import time_arms

from strata.kernels import packed_q8, packed_q8_joined, q8_rounding

D = 2048
OLD = dict(BLOCK_N=4, SUPERBLOCKS=8, num_warps=2, num_stages=3)
for rows in (5, 8):
    x = torch.randn(rows, D, device="cuda", dtype=torch.bfloat16)
    q = q8_rounding.quantize(x)
    copies = 24
    joined = [[(packed_q8.Q4_K, blocks(packed_q8.Q4_K, 4608, D, seed=s).cuda()),
               (packed_q8.Q6_K, blocks(packed_q8.Q6_K, 512, D, seed=100 + s).cuda())] for s in range(copies)]
    arms = {"joined_new": lambda i: packed_q8_joined.packed_gemv_q8_joined(x, joined[i], D, quantized=q),
            "joined_old": lambda i: packed_q8_joined.packed_gemv_q8_joined(x, joined[i], D, quantized=q, config=OLD)}
    times, _ = time_arms(arms, copies)
    print(f"joined q/k/v rows {rows}: {times}", flush=True)
    for qtype in (packed_q8.Q6_K, packed_q8.Q3_K):
        ws = [blocks(qtype, 4096, D, seed=s).cuda() for s in range(copies)]
        arms = {"new": lambda i: packed_q8.packed_gemv_q8(x, ws[i], qtype, 4096, D, quantized=q),
                "old": lambda i: packed_q8.packed_gemv_q8(x, ws[i], qtype, 4096, D, quantized=q, config=OLD)}
        new, old = arms["new"](0).float(), arms["old"](0).float()
        err = ((new - old).abs().max() / old.abs().max()).item()
        times, _ = time_arms(arms, copies)
        print(f"type {qtype} 4096x{D} rows {rows}: {times} (new vs old rel. diff {err:.1e})", flush=True)
