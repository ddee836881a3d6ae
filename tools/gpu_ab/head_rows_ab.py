"""The Q6_K LM heads (Qwen4-Exp's 248,320 x 2,560 and the 30B-A3B's 151,936 x 2,048) at 1-16 rows, three ways, inside
CUDA graphs with two rotated weight copies (cold L2): packed_q8's GEMV on 8-bit activations (the default up to
LINEAR_MAX_ROWS rows), dequantize to bf16 + cuBLAS GEMM (the default past it), and cuBLAS on a bf16 copy kept
dequantized (what a head kept dense in VRAM would cost). us per call. Usage: head_rows_ab.py [rows ...]."""
import sys, torch
from graph_timing import graph_time
from strata.kernels import packed_dequant, packed_q8, q8_rounding
sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks

Q6_K = 14
rows_list = [int(a) for a in sys.argv[1:]] or [1, 2, 4, 8, 16]
for name, n, k in (("q4e_head", 248320, 2560), ("a3b_head", 151936, 2048)):
    ws = [random_blocks(Q6_K, n, k, seed=s).cuda() for s in (1, 2)]
    dense = [packed_dequant.dequantize(w, Q6_K, k, torch.bfloat16) for w in ws]      # [n, k] bf16 each
    for rows in rows_list:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        q = q8_rounding.quantize(x)
        packed = graph_time(lambda i: packed_q8.packed_gemv_q8(x, ws[i], Q6_K, n, k, quantized=q), 2)
        dequant = graph_time(lambda i: x @ packed_dequant.dequantize(ws[i], Q6_K, k, torch.bfloat16).T, 2)
        kept = graph_time(lambda i: x @ dense[i].T, 2)
        print(f"{name} rows={rows}: packed_q8 {packed:.1f} us, dequantize + GEMM {dequant:.1f}, "
              f"kept bf16 GEMM {kept:.1f}", flush=True)
    del ws, dense
