"""packed_mm (tensor cores, 16-bit x) against packed_q8 (dp4a, x rounded to 8 bits; its rounding launch timed apart)
and against dequantize + cuBLAS (ops.packed_linear's path past 8 rows), at 1 / 4 / 8 / 16 rows of x, inside CUDA
graphs with two rotated weight copies (cold L2): the Q6_K LM heads of Qwen4-Exp and the 30B-A3B, and the 30B-A3B's
Q4_K q_proj and o_proj. Prints us per call for each arm and packed_mm tiling. Usage: packed_mm_ab.py [quick]."""
import sys, torch
from graph_timing import graph_time
from strata.kernels import packed_dequant, packed_mm, packed_q8
sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks

Q4_K, Q6_K = 12, 14
quick = "quick" in sys.argv[1:]
shapes = (("q4e_head", Q6_K, 248320, 2560), ("a3b_head", Q6_K, 151936, 2048), ("a3b_q_proj", Q4_K, 4096, 2048),
          ("a3b_o_proj", Q4_K, 2048, 4096))
tilings = [dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=w, num_stages=st)
           for bn, sb, w, st in ((64, 1, 4, 2), (32, 1, 4, 2), (128, 1, 4, 2), (64, 2, 4, 2), (128, 1, 8, 2), (64, 1, 4, 3),
                                 (32, 2, 2, 2), (16, 1, 2, 2))][: 3 if quick else None]
for name, qtype, n, k in shapes:
    ws = [random_blocks(qtype, n, k, seed=s).cuda() for s in (1, 2)]
    for rows in (1, 4, 8, 16):
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16) * 0.1
        line = [f"{name} rows={rows:2d}"]
        want = packed_mm.packed_mm_ref(x[:2].cpu(), ws[0][:64].cpu(), qtype, k)  # a spot check of the arm timed
        got = packed_mm.packed_mm(x[:2], ws[0][:64], qtype, 64, k)
        line.append(f"err {((got.cpu() - want).abs().max() / want.abs().max()).item():.1e}")
        if rows <= packed_q8.MAX_ROWS:
            q = packed_q8.quantize(x)
            line.append(f"q8 {graph_time(lambda i: packed_q8.packed_gemv_q8(x, ws[i], qtype, n, k, quantized=q), 2):7.1f}")
            line.append(f"(+round {graph_time(lambda i: packed_q8.quantize(x), 2):4.1f})")
        line.append(f"deq+mm {graph_time(lambda i: x @ packed_dequant.dequantize(ws[i], qtype, k, x.dtype).t(), 2):7.1f}")
        best = None
        for cfg in tilings:
            try:
                t = graph_time(lambda i, c=cfg: packed_mm.packed_mm(x, ws[i], qtype, n, k, config=c), 2)
            except Exception as e:  # noqa: BLE001 - a tiling that does not compile
                print(name, rows, cfg, "failed", type(e).__name__, str(e)[:200], flush=True)
                continue
            best = min(best or (t, cfg), (t, cfg), key=lambda b: b[0])
            line.append(f"mm{cfg['BLOCK_N']}x{cfg['SUPERBLOCKS']}w{cfg['num_warps']}s{cfg['num_stages']} {t:7.1f}")
        print("  ".join(line), flush=True)
        if best:
            print(f"== {name} rows={rows} best packed_mm {best[1]} {best[0]:.1f} us", flush=True)
    del ws
