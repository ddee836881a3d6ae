"""One call of packed_q8's GEMV for Nsight Compute (`ncu --profile-from-start off`): the 30B-A3B's attention
projections at Q4_K_M (issue 23's model) at ROWS rows of x (8: a decode step of 8 streams, where session 58's trace
put the joined q/k/v GEMV at 18.6 us and o_proj at 12.5, ~10x their bytes' copy time, against 5.7 and 5.0 at one row).
argv[1]: qkv (packed_q8_joined: Q4_K q + k rows, then Q6_K v rows) or o (o_proj, Q4_K). Compiles and warms first,
then profiles one call of each between cudaProfilerStart / Stop."""
import os
import sys

import torch

from strata.kernels import packed_q8, packed_q8_joined, q8_rounding
from expert_blocks import blocks

D, Q, KV = 2048, 4096, 512
rows = int(os.environ.get("ROWS", "8"))
if sys.argv[1] == "qkv":
    segments = [(packed_q8.Q4_K, blocks(packed_q8.Q4_K, Q + KV, D, seed=1).cuda()),
                (packed_q8.Q6_K, blocks(packed_q8.Q6_K, KV, D, seed=2).cuda())]
    x = torch.randn(rows, D, device="cuda", dtype=torch.bfloat16)
    q = q8_rounding.quantize(x)
    run = lambda: packed_q8_joined.packed_gemv_q8_joined(x, segments, D, quantized=q)  # noqa: E731
else:
    w = blocks(packed_q8.Q4_K, D, Q, seed=3).cuda()
    x = torch.randn(rows, Q, device="cuda", dtype=torch.bfloat16)
    q = q8_rounding.quantize(x)
    run = lambda: packed_q8.packed_gemv_q8(x, w, packed_q8.Q4_K, D, Q, quantized=q)  # noqa: E731
for _ in range(3):
    run()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
run()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
