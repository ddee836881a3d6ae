"""packed_gemv (group sums, accumulator) against packed_gemv_words on decode shapes, timed inside CUDA graphs
(launch overhead out), weights rotated over copies so L2 is cold; GB/s of packed bytes; copy bandwidth beside."""
import json, os, sys, torch
from strata.kernels import packed_gemv, packed_gemv_words
from strata.kernels.packed_gemv import BLOCK_LAYOUT
sys.path.insert(0, "tests")
from kernels.test_packed_gemv import random_blocks

def graph_time(fn, copies, reps=5):
    fn(0); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(0)
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            for i in range(copies * 4): fn(i % copies)
    torch.cuda.synchronize()
    g.replay(); torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for _ in range(reps): g.replay()
    ev[1].record(); torch.cuda.synchronize()
    return ev[0].elapsed_time(ev[1]) * 1e3 / (reps * copies * 4)

big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(big)
us = graph_time(lambda i: dst.copy_(big), 1, reps=3)
copy_gbs = 2 * big.numel() / us / 1e3
print(f"copy bandwidth {copy_gbs:.0f} GB/s (read+write)", flush=True)
del big, dst
SHAPES = [("lm_head", 248320, 2560, 14), ("lm_head_30b", 151936, 2048, 14), ("gdn_qkv", 12288, 2560, 13),
          ("gdn_z", 4096, 2560, 12), ("o_proj", 2560, 6144, 12), ("gdn_out", 2560, 4096, 12), ("attn_v", 512, 2560, 14),
          ("q4k_12288", 12288, 2560, 12), ("q6k_4096", 4096, 2560, 14), ("q5k_2048", 2048, 2048, 13)]
WORDS = [dict(BLOCK_N=bn, num_warps=w, SUPERBLOCKS=sb, num_stages=st) for bn, w, sb, st in
         ((8, 1, 1, 3), (16, 2, 1, 3), (4, 1, 1, 3), (8, 2, 2, 3), (4, 2, 2, 3), (4, 4, 4, 3), (8, 4, 4, 3), (2, 4, 4, 3),
          (16, 4, 4, 3), (4, 8, 8, 2), (2, 2, 4, 3), (8, 8, 8, 2))]
rows = []
for name, n, k, q in SHAPES:
    per, bb = BLOCK_LAYOUT[q]
    nbytes = n * k // per * bb
    copies = max(2, min(16, int(1.2e9 // nbytes)))
    ws = [random_blocks(q, n, k, seed=i).cuda() for i in range(2)]
    ws = [ws[i % 2].clone() for i in range(copies)]
    for m in (1, 2):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref = packed_gemv.packed_gemv_ref(x, ws[0], q, n, k)
        arms = [("groups", lambda i, x=x: packed_gemv.packed_gemv(x, ws[i], q, n, k, config=dict(WORDS=False, ACC=False)), {})]
        if q == 14:
            arms.append(("acc", lambda i, x=x: packed_gemv.packed_gemv(x, ws[i], q, n, k, config=dict(ACC=True, BLOCK_N=8, SUPERBLOCKS=1)), {}))
        for cfg in WORDS:
            arms.append(("words", lambda i, x=x, cfg=cfg: packed_gemv_words.packed_gemv_words(x, ws[i], q, n, k, config=cfg), cfg))
        for arm, fn, cfg in arms:
            try:
                out = fn(0)
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                t = graph_time(fn, copies)
                rows.append(dict(shape=name, n=n, k=k, qtype=q, m=m, arm=arm, **cfg, us=round(t, 2), gbs=round(nbytes / t / 1e3, 1), err=err))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(shape=name, qtype=q, m=m, arm=arm, **cfg, error=str(e)[:300]))
        best = {}
        for r in rows:
            if r["shape"] == name and r["m"] == m and "us" in r:
                if r["arm"] not in best or r["us"] < best[r["arm"]]["us"]: best[r["arm"]] = r
        print(name, n, k, q, "m", m, {a: (b["us"], b["gbs"], b.get("BLOCK_N"), b.get("num_warps"), b.get("SUPERBLOCKS"), f'{b["err"]:.1e}') for a, b in best.items()}, flush=True)
    del ws
for r in rows:
    if "error" in r: print("ERROR", r)
json.dump(dict(copy_gbs=copy_gbs, rows=rows), open(os.path.join(os.environ.get("OUT", "/tmp"), "words_ab.json"), "w"), indent=1)
