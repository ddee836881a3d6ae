"""Packed GEMVs per block type at 1, 4 and 8 rows, inside CUDA graphs with weights rotated (cold L2): packed_q8 (8-bit
activations) and packed_gemv (float activations) where they read the type, and dequantize to bf16 (packed_dequant),
on the 30B-A3B's q_proj (4,096 x 2,048), its shared / dense-sized 6,144 x 2,048 and an expert-sized 1,536 x 2,048
gate/up. us per call and GB/s of packed bytes: whether Q2_K / Q3_K rows read at the bandwidth Q4_K's do (fewer bytes,
more decode work a byte). Usage: [LOWBIT_TYPES=IQ2_XXS,Q4_K,...] lowbit_ab.py [rows ...]."""
import os
import sys

import torch
from graph_timing import graph_time

from strata.kernels import packed_dequant, packed_gemv, packed_q8, q8_rounding
from strata.kernels.gguf_blocks import block_format

sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks

from gguf import GGMLQuantizationType

TYPES = {name: int(GGMLQuantizationType[name])
         for name in os.environ.get("LOWBIT_TYPES", "Q2_K,Q3_K,Q4_K,Q5_K,Q6_K").split(",")}
rows_list = [int(a) for a in sys.argv[1:]] or [1, 4, 8]
for shape_name, n, k in (("q_proj", 4096, 2048), ("wide", 6144, 2048), ("gate_up", 1536, 2048)):
    for type_name, qtype in TYPES.items():
        nbytes = n * block_format(qtype).row_bytes(k)
        copies = max(2, min(32, int(4e8 // nbytes)))
        ws = [random_blocks(qtype, n, k, seed=s).cuda() for s in range(copies)]
        out = {}
        for rows in rows_list:
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            if packed_q8.supports(qtype, k, ws[0]) and rows <= packed_q8.MAX_ROWS:
                q = q8_rounding.quantize(x)
                t = graph_time(lambda i: packed_q8.packed_gemv_q8(x, ws[i], qtype, n, k, quantized=q), copies)
                out[f"q8 r{rows}"] = (round(t, 1), round(nbytes / t / 1e3))
            if packed_gemv.supports(qtype, k) and rows <= 2:
                t = graph_time(lambda i: packed_gemv.packed_gemv(x, ws[i], qtype, n, k), copies)
                out[f"gemv r{rows}"] = (round(t, 1), round(nbytes / t / 1e3))
        t = graph_time(lambda i: packed_dequant.dequantize(ws[i], qtype, k, torch.bfloat16), copies)
        out["dequant"] = (round(t, 1), round(nbytes / t / 1e3))
        print(f"{shape_name} {n}x{k} {type_name} ({nbytes / 2**20:.1f} MiB): " +
              ", ".join(f"{arm} {us} us {gbs} GB/s" for arm, (us, gbs) in out.items()), flush=True)
        del ws
