"""packed_gemv on Qwen4-Exp's decode shapes: the group-sum loop (ACC False) against the accumulator loop
(ACC True) over a few tilings; one row, weights rotated over copies so L2 is cold; GB/s of packed bytes."""
import itertools, json, os, sys, torch
from strata.kernels import packed_gemv
from strata.kernels.packed_gemv import BLOCK_LAYOUT
sys.path.insert(0, "tests")
from kernels.test_packed_gemv import random_blocks

SHAPES = [("lm_head", 248320, 2560, 14), ("gdn_qkv", 12288, 2560, 13), ("gdn_z", 4096, 2560, 12),
          ("o_proj", 2560, 6144, 12), ("gdn_out", 2560, 4096, 12), ("down640", 2560, 640, 6), ("iq4xs", 12288, 2560, 23),
          ("q8", 12288, 2560, 8)]
CONFIGS = [dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=w, ACC=acc) for acc in (False, True)
           for bn, sb, w in ((4, 4, 2), (8, 2, 4), (16, 1, 4), (8, 1, 2), (16, 2, 8), (32, 1, 8))]
rows = []
for name, n, k, q in SHAPES:
    per, bb = BLOCK_LAYOUT[q]
    nbytes = n * k // per * bb
    copies = max(1, min(8, int(2e9 // nbytes)))
    ws = [random_blocks(q, n, k, seed=i).cuda() for i in range(min(copies, 2))]
    ws = [ws[i % len(ws)].clone() for i in range(copies)]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    ref = packed_gemv.packed_gemv_ref(x, ws[0], q, n, k)
    for cfg in CONFIGS:
        try:
            out = packed_gemv.packed_gemv(x, ws[0], q, n, k, config=cfg)
            err = ((out - ref).abs().max() / ref.abs().max()).item()
            for _ in range(3):
                for w in ws: packed_gemv.packed_gemv(x, w, q, n, k, config=cfg)
            torch.cuda.synchronize()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            reps = 20
            ev[0].record()
            for i in range(reps * copies): packed_gemv.packed_gemv(x, ws[i % copies], q, n, k, config=cfg)
            ev[1].record(); torch.cuda.synchronize()
            us = ev[0].elapsed_time(ev[1]) * 1e3 / (reps * copies)
            rows.append(dict(shape=name, n=n, k=k, qtype=q, **cfg, us=round(us, 2), gbs=round(nbytes / us / 1e3, 1), err=err))
        except Exception as e:  # noqa: BLE001
            rows.append(dict(shape=name, qtype=q, **cfg, error=str(e)[:200]))
    best = {acc: min((r for r in rows if r["shape"] == name and r.get("ACC") == acc and "us" in r), key=lambda r: r["us"], default=None) for acc in (False, True)}
    print(name, n, k, q, {a: (b["us"], b["gbs"], b["BLOCK_N"], b["SUPERBLOCKS"], b["num_warps"]) if b else None for a, b in best.items()}, flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "gemv_ab.json"), "w"), indent=1)
