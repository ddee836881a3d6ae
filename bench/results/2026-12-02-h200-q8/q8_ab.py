"""packed_q8 (8-bit activations, dp4a) against the float decoders on decode shapes of Q4_K_M files, timed
inside CUDA graphs (launch gaps out) with weights rotated over copies (cold L2); GB/s of packed bytes read.
Writes $OUT/q8_ab.json; prints the best of each arm per shape."""
import json, os, sys, torch
import torch.nn.functional as F
from strata.kernels import packed_dequant, packed_gemv, packed_moe, packed_q8
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
            for i in range(copies * 4):
                fn(i % copies)
    torch.cuda.synchronize()
    g.replay(); torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for _ in range(reps):
        g.replay()
    ev[1].record(); torch.cuda.synchronize()
    return ev[0].elapsed_time(ev[1]) * 1e3 / (reps * copies * 4)


big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(big)
us = graph_time(lambda i: dst.copy_(big), 1, reps=3)
copy_gbs = 2 * big.numel() / us / 1e3
print(f"copy bandwidth {copy_gbs:.0f} GB/s (read+write)", flush=True)
del big, dst
rows = []
CONFIGS = [dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=w, num_stages=st) for bn, sb, w, st in
           ((4, 2, 2, 3), (2, 4, 2, 3), (8, 1, 2, 3), (4, 1, 1, 3), (8, 2, 4, 3), (16, 1, 4, 3), (2, 2, 1, 3),
            (4, 4, 4, 3), (8, 4, 8, 2), (1, 8, 2, 3))]


def record(shape, arm, cfg, t, nbytes, err, **extra):
    rows.append(dict(shape=shape, arm=arm, **(cfg or {}), us=round(t, 2), gbs=round(nbytes / t / 1e3, 1), err=err, **extra))


def best_of(shape, **match):
    best = {}
    for r in rows:
        if r["shape"] == shape and all(r.get(k) == v for k, v in match.items()) and "us" in r:
            if r["arm"] not in best or r["us"] < best[r["arm"]]["us"]:
                best[r["arm"]] = r
    return {a: (b["us"], b["gbs"], b.get("BLOCK_N"), b.get("SUPERBLOCKS"), b.get("num_warps"), f'{b["err"]:.1e}')
            for a, b in best.items()}


# ---- projections: (name, N, K, type): the 30B-A3B and Qwen4-Exp shapes at Q4_K_M
SHAPES = [("q_proj_30b", 4096, 2048, 12), ("o_proj_30b", 2048, 4096, 12), ("k_proj_30b", 512, 2048, 12),
          ("v_proj_30b", 512, 2048, 14), ("lm_head_30b", 151936, 2048, 14), ("gdn_qkv_q4e", 12288, 2560, 12),
          ("o_proj_q4e", 2560, 6144, 12), ("lm_head_q4e", 248320, 2560, 14), ("q6k_4096", 4096, 2560, 14)]
MULTI = {"q_proj_30b", "gdn_qkv_q4e"}
for name, n, k, q in SHAPES:
    per, bb = BLOCK_LAYOUT[q]
    nbytes = n * k // per * bb
    copies = max(2, min(16, int(1.2e9 // nbytes)))
    ws = [random_blocks(q, n, k, seed=i).cuda() for i in range(2)]
    ws = [ws[i % 2].clone() for i in range(copies)]
    for m in ((1, 2, 4, 8, 16) if name in MULTI else (1,)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref = packed_gemv.packed_gemv_ref(x, ws[0], q, n, k)
        scale = ref.abs().max()
        if m <= 2:
            arms = [("float", lambda i, x=x: packed_gemv.packed_gemv(x, ws[i], q, n, k), None)]
        else:
            arms = [("dequant_mm", lambda i, x=x: F.linear(x, packed_dequant.dequantize(ws[i], q, k, x.dtype)), None)]
        for cfg in CONFIGS:
            arms.append(("q8", lambda i, x=x, cfg=cfg: packed_q8.packed_gemv_q8(x, ws[i], q, n, k, config=cfg), cfg))
        quantized = packed_q8.quantize(x)
        arms.append(("q8_quantize_only", lambda i, x=x: packed_q8.quantize(x), None))
        for arm, fn, cfg in arms:
            try:
                out = fn(0)
                err = 0.0 if arm == "q8_quantize_only" else ((out.float() - ref).abs().max() / scale).item()
                record(name, arm, cfg, graph_time(fn, copies), nbytes, err, m=m, n=n, k=k, qtype=q)
            except Exception as e:  # noqa: BLE001
                rows.append(dict(shape=name, m=m, arm=arm, **(cfg or {}), error=str(e)[:300]))
        print(name, n, k, q, "m", m, best_of(name, m=m), flush=True)
    del ws

# ---- routed experts of one layer: 30B-A3B (128 experts, 2048 -> 768, top 8), gate/up Q4_K, down Q6_K or Q4_K
E, D, I, TOP = 128, 2048, 768, 8
PAIR_CONFIGS = [dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=w, num_stages=3) for bn, sb, w in
                ((4, 2, 2), (2, 4, 2), (8, 1, 2), (4, 1, 1), (8, 2, 4), (16, 1, 4), (2, 2, 1), (1, 8, 2))]
for down in (14, 12):
    w13 = random_blocks(12, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
    w2 = random_blocks(down, E * D, I, seed=2).cuda().view(E, D, -1)
    nb13, nb2 = w13[0].numel(), w2[0].numel()
    gen = torch.Generator().manual_seed(0)
    for tokens in (1, 8, 16):
        hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
        id_sets = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(8)]
        wts = torch.rand(tokens, TOP, device="cuda")
        used = sum(ids.unique().numel() for ids in id_sets) / len(id_sets)
        nbytes = used * (nb13 + nb2)
        ref = packed_moe._pairs(hidden, w13, 12, w2, down, id_sets[0], wts)
        scale = ref.abs().max()
        shape = f"moe_30b_down{down}_t{tokens}"
        arms = [("float_pairs", lambda i: packed_moe._pairs(hidden, w13, 12, w2, down, id_sets[i], wts), None)]
        if tokens > 1:
            arms.append(("float_grouped", lambda i: packed_moe._grouped(hidden, w13, 12, w2, down, id_sets[i], wts), None))
        for cfg in PAIR_CONFIGS:
            arms.append(("q8_pairs", lambda i, cfg=cfg: packed_q8.moe_pairs_q8(hidden, w13, 12, w2, down, id_sets[i], wts, config=cfg), cfg))
        for arm, fn, cfg in arms:
            try:
                out = fn(0)
                err = ((out - ref).abs().max() / scale).item()
                record(shape, arm, cfg, graph_time(fn, len(id_sets)), nbytes, err, tokens=tokens)
            except Exception as e:  # noqa: BLE001
                rows.append(dict(shape=shape, arm=arm, **(cfg or {}), error=str(e)[:300]))
        print(shape, f"experts used {used:.0f}", best_of(shape), flush=True)
    del w13, w2
for r in rows:
    if "error" in r:
        print("ERROR", r)
json.dump(dict(copy_gbs=copy_gbs, rows=rows), open(os.path.join(os.environ.get("OUT", "/tmp"), "q8_ab.json"), "w"), indent=1)
