"""Packed projections at 4-64 rows of x, inside CUDA graphs with weights rotated (cold L2): packed_q8's GEMV (8-bit
activations, dp4a; up to its MAX_ROWS), packed_mmq.linear_q8 (the same numbers on int8 tensor cores) under a few
tilings (SPLIT_K > 1: K split among programs, for narrow weights' long rows), and dequantize to bf16 + cuBLAS
(what ops.packed_linear does where neither takes a step). Shapes: the 30B-A3B's q_proj / o_proj / v_proj and LM
head, Qwen4-Exp's LM head. us per call: where linear_q8 should take over.
Usage: [LINEAR_ROWS=4,8,16,32,64] [LINEAR_SHAPES=30b_q_proj,...] linear_mmq_ab.py; writes $OUT/linear_mmq_ab.json."""
import json
import os
import sys

import torch
from graph_timing import time_arms

from strata.kernels import packed_dequant, packed_mmq, packed_q8, q8_rounding
from strata.kernels.gguf_blocks import block_format

sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks

Q4_K, Q6_K = packed_q8.Q4_K, packed_q8.Q6_K
SHAPES = [("30b_q_proj", 4096, 2048, Q4_K), ("30b_o_proj", 2048, 4096, Q4_K), ("30b_v_proj", 512, 2048, Q6_K),
          ("30b_head", 151936, 2048, Q6_K), ("qwen4exp_head", 248320, 2560, Q6_K)]
wanted = os.environ.get("LINEAR_SHAPES", ",".join(name for name, *_ in SHAPES)).split(",")
SHAPES = [shape for shape in SHAPES if shape[0] in wanted]
# (BLOCK_M, BLOCK_N, warps, stages, SPLIT_K)
TILINGS = [(16, 32, 4, 2, 1), (16, 64, 4, 2, 1), (16, 128, 4, 2, 1), (16, 64, 4, 3, 1), (16, 64, 8, 2, 1),
           (32, 64, 4, 2, 1), (16, 32, 4, 2, 2), (16, 32, 4, 2, 4), (16, 32, 4, 2, 8), (16, 64, 4, 2, 4)]
rows_list = [int(r) for r in os.environ.get("LINEAR_ROWS", "4,8,16,32,64").split(",")]
results = {}
for name, n, k, qtype in SHAPES:
    nbytes = n * block_format(qtype).row_bytes(k)
    copies = max(2, min(16, int(4e8 // nbytes)))
    ws = [random_blocks(qtype, n, k, seed=s).cuda() for s in range(copies)]
    for rows in rows_list:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        q = q8_rounding.quantize(x)
        arms = {}
        if rows <= packed_q8.MAX_ROWS:
            arms["q8_gemv"] = lambda i: packed_q8.packed_gemv_q8(x, ws[i], qtype, n, k, quantized=q)
        for bm, bn, warps, stages, split_k in TILINGS:
            if (bm > 16 and rows <= 16) or (split_k > 1 and (n >= 32768 or k % (256 * split_k))):
                continue
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages, SPLIT_K=split_k)
            arms[f"mmq_m{bm}_n{bn}_w{warps}_s{stages}" + (f"_k{split_k}" if split_k > 1 else "")] = (
                lambda i, cfg=cfg: packed_mmq.linear_q8(x, ws[i], qtype, n, k, config=cfg, quantized=q))
        arms["dequant_gemm"] = lambda i: x @ packed_dequant.dequantize(ws[i], qtype, k, torch.bfloat16).T
        times, numeric = time_arms(arms, copies, digits=1)
        best = min(numeric, key=numeric.get)
        results[f"{name} r{rows}"] = times
        print(f"{name} {n}x{k} q{qtype} ({nbytes / 2**20:.0f} MiB) rows {rows}: best {best} {numeric[best]} us; "
              + ", ".join(f"{a} {t}" for a, t in times.items()), flush=True)
    ws.clear()
with open(os.path.join(os.environ.get("OUT", "/tmp"), "linear_mmq_ab.json"), "w") as f:
    json.dump({"commit": os.environ.get("STRATA_COMMIT"), "results": results}, f, indent=1)
