"""packed_q8's GEMV at several rows of x under many tilings, against dequantize to bf16 + cuBLAS (what
ops.packed_linear took beyond 4 rows for narrow weights until session 50), inside CUDA graphs with weights rotated (cold L2). Shapes: the
30B-A3B's attention projections at Q4_K_M. Session 39 timed only default_config's tiling at 8 rows (o_proj 26.7 us
against 14.2 dequantized); this asks whether any tiling makes 5-16 rows pay. GEMV_ISUM (comma list, default: the
default's own) times each tiling at those K-step sums (q8_steps.k_step's ISUM; 2: a group's words in a loop), and
`default_isumN` is default_config's tiling at each; GEMV_GRID=0 times only the defaults and dequantize + GEMM.
GEMV_GRID=narrow (session 56) times 1-4 rows of W a program with 2-8 superblocks a step instead: more programs
and fewer K steps each, which session 50's grid (4+ rows of W, 1-2 superblocks) left out; at 8 rows of x they
compile for sm_90 without spills (BLOCK_N 1, 8 superblocks, 4 warps: 72 registers for Q4_K, 63 for Q6_K).
Usage: [GEMV_ROWS=8,16] [GEMV_ISUM=1,2] [GEMV_GRID=0|narrow] gemv_rows_sweep.py; writes $OUT/gemv_rows_sweep.json
(pick_gemv_tiling.py lists each row count's best tilings)."""
import itertools
import json
import os
import sys

import torch
from graph_timing import time_arms

from strata.kernels import packed_dequant, packed_q8, q8_rounding
from strata.kernels.gguf_blocks import block_format

sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks

Q4_K, Q6_K = packed_q8.Q4_K, packed_q8.Q6_K
SHAPES = [("30b_q_proj", 4096, 2048, Q4_K), ("30b_o_proj", 2048, 4096, Q4_K), ("30b_v_proj", 512, 2048, Q6_K),
          ("30b_k_proj", 512, 2048, Q4_K)]
# (BLOCK_N, SUPERBLOCKS, warps)
GRIDS = {"1": list(itertools.product((4, 8, 16, 32), (1, 2), (1, 2, 4))),
         "narrow": list(itertools.product((1, 2, 4), (2, 4, 8), (1, 2, 4))), "0": []}
rows_list = [int(r) for r in os.environ.get("GEMV_ROWS", "8,16").split(",")]
isums = [int(v) for v in os.environ.get("GEMV_ISUM", "").split(",") if v]
results = {}
for name, n, k, qtype in SHAPES:
    nbytes = n * block_format(qtype).row_bytes(k)
    copies = max(2, min(64, int(4e8 // nbytes)))
    ws = [random_blocks(qtype, n, k, seed=s).cuda() for s in range(copies)]
    for rows in rows_list:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        q = q8_rounding.quantize(x)
        arms = {"default": lambda i: packed_q8.packed_gemv_q8(x, ws[i], qtype, n, k, quantized=q)}
        for isum in isums:
            arms[f"default_isum{isum}"] = (lambda i, isum=isum: packed_q8.packed_gemv_q8(
                x, ws[i], qtype, n, k, config=dict(ISUM=isum), quantized=q))
        grid = GRIDS[os.environ.get("GEMV_GRID", "1")]
        for (bn, sb, warps), isum in itertools.product(grid, isums or [None]):
            cfg = dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3)
            if isum is not None:
                cfg["ISUM"] = isum
            arms[f"n{bn}_s{sb}_w{warps}" + ("" if isum is None else f"_i{isum}")] = (
                lambda i, cfg=cfg: packed_q8.packed_gemv_q8(x, ws[i], qtype, n, k, config=cfg, quantized=q))
        arms["dequant_gemm"] = lambda i: x @ packed_dequant.dequantize(ws[i], qtype, k, torch.bfloat16).T
        expected = arms["default"](0).float()
        for arm, fn in list(arms.items())[1:-1]:  # each tiling's sums against the default's (one summation order
            try:                                      # per K step: ~1e-7); time_arms reports one that fails
                err = ((fn(0).float() - expected).abs().max() / expected.abs().max()).item()
            except Exception:  # noqa: BLE001
                continue
            if err > 1e-5:
                print(f"  {name} rows {rows} {arm}: off the default by {err:.2e} of the largest output", flush=True)
        times, numeric = time_arms(arms, copies)
        ranked = sorted(numeric, key=numeric.get)
        results[f"{name} r{rows}"] = times
        print(f"{name} {n}x{k} q{qtype} rows {rows}: " + ", ".join(f"{a} {numeric[a]}" for a in ranked[:6])
              + f" | default {numeric.get('default')} dequant_gemm {numeric.get('dequant_gemm')} "
              + " ".join(f"default_isum{v} {numeric.get(f'default_isum{v}')}" for v in isums), flush=True)
    ws.clear()
with open(os.path.join(os.environ.get("OUT", "/tmp"), "gemv_rows_sweep.json"), "w") as f:
    json.dump({"commit": os.environ.get("STRATA_COMMIT"), "results": results}, f, indent=1)
