"""The Qwen4-Exp LM head's one-row GEMV (Q6_K, 248,320 x 2,560, ~521 MB) on 8-bit activations under tilings
of packed_q8.packed_gemv_q8, inside CUDA graphs with two rotated weight copies (cold L2): us and GB/s each,
default_config's first. Also the 30B-A3B head (Q6_K 151,936 x 2,048). Usage: head_sweep.py [rows] [wide]
("wide": 4 to 64 rows of W a program instead of 1 to 16)."""
import sys, torch
from graph_timing import graph_time
from strata.kernels import packed_q8, q8_rounding
sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks

Q6_K = 14
rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1
block_ns = (4, 8, 16, 32, 64) if "wide" in sys.argv[2:] else (1, 2, 4, 8, 16)
for name, n, k in (("q4e_head", 248320, 2560), ("a3b_head", 151936, 2048)):
    ws = [random_blocks(Q6_K, n, k, seed=s).cuda() for s in (1, 2)]
    nbytes = ws[0].numel()
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    q = q8_rounding.quantize(x)
    configs = [None] + [dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=w, num_stages=st)
                        for bn in block_ns for sb in (1, 2) for w in (1, 2, 4) for st in (3,)]
    results = []
    for cfg in configs:
        try:
            t = graph_time(lambda i, c=cfg: packed_q8.packed_gemv_q8(x, ws[i], Q6_K, n, k, config=c, quantized=q), 2)
        except Exception as e:  # noqa: BLE001 - a tiling that does not compile
            print(name, cfg, "failed", type(e).__name__, flush=True)
            continue
        results.append((t, cfg))
        print(f"{name} rows={rows} {cfg or packed_q8.default_config(n, k, rows)}: {t:.1f} us {nbytes / t / 1e3:.0f} GB/s",
              flush=True)
    best = sorted(results, key=lambda r: r[0])[:3]
    for t, cfg in best:
        for st in (2, 4):
            c = {**cfg, "num_stages": st} if cfg else None
            if c is None:
                continue
            t2 = graph_time(lambda i: packed_q8.packed_gemv_q8(x, ws[i], Q6_K, n, k, config=c, quantized=q), 2)
            print(f"{name} rows={rows} {c}: {t2:.1f} us {nbytes / t2 / 1e3:.0f} GB/s", flush=True)
    print(f"== {name} best {best[0][1]} {best[0][0]:.1f} us (default {results[0][0]:.1f})", flush=True)
    del ws
