"""packed_q8 at this commit against packed_q8_prev.py (call 5: commit 2ea683f, Q6_K's funnel reading half
words), in one process, inside CUDA graphs with cold weights (rotated copies). Writes $OUT/q8_ab3.json."""
import json, os, sys, torch
from strata.kernels import packed_q8
import packed_q8_prev
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


rows = []
for name, n, k, q in [("v_proj_30b", 512, 2048, 14), ("lm_head_30b", 151936, 2048, 14), ("lm_head_q4e", 248320, 2560, 14)]:
    nbytes = packed_q8.row_bytes(q, k) * n
    copies = max(2, min(16, int(1.2e9 // nbytes)))
    ws = [random_blocks(q, n, k, seed=i).cuda() for i in range(2)]
    ws = [ws[i % 2].clone() for i in range(copies)]
    for m in ((1,) if n > 100000 else (1, 8)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        res = {}
        for arm, mod in (("prev", packed_q8_prev), ("new", packed_q8), ("prev2", packed_q8_prev), ("new2", packed_q8)):
            if arm.startswith("prev") and q not in (12, 14) and not hasattr(mod, "UNIT"):
                continue
            cfg = packed_q8.default_config(n, k, m)
            fn = lambda i, x=x, mod=mod, cfg=cfg: mod.packed_gemv_q8(x, ws[i], q, n, k, config=cfg)
            res[arm] = t = round(graph_time(fn, copies), 2)
            rows.append(dict(shape=name, m=m, arm=arm, us=t, gbs=round(nbytes / t / 1e3, 1)))
        print(name, n, k, q, "m", m, res, flush=True)
    del ws
E, D, I, TOP = 128, 2048, 768, 8
w13 = random_blocks(12, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
w2 = random_blocks(14, E * D, I, seed=2).cuda().view(E, D, -1)
gen = torch.Generator().manual_seed(0)
for tokens in (1, 8):
    hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
    id_sets = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(8)]
    wts = torch.rand(tokens, TOP, device="cuda")
    res = {}
    for arm, mod in (("prev", packed_q8_prev), ("new", packed_q8), ("prev2", packed_q8_prev), ("new2", packed_q8)):
        fn = lambda i, mod=mod: mod.moe_pairs_q8(hidden, w13, 12, w2, 14, id_sets[i], wts)
        res[arm] = t = round(graph_time(fn, len(id_sets)), 2)
        rows.append(dict(shape=f"moe_30b_t{tokens}", arm=arm, us=t))
    print("moe_30b t", tokens, res, flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "q8_ab3.json"), "w"), indent=1)
