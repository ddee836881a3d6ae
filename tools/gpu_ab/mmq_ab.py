"""Routed experts of the 30B-A3B shape (128 experts of 768, top 8, Q4_K gate/up, Q6_K down) for steps of
1-64 tokens, inside CUDA graphs with cold routing (8 rotated id sets): packed_q8.moe_pairs_q8 (the dispatched
decode path), packed_mmq.moe_grouped_q8 under a few tilings, and packed_moe's float grouped kernels (its
path past PAIRS_MAX). Writes $OUT/mmq_ab.json."""
import json, os, sys, torch
from strata.kernels import packed_moe, packed_mmq, packed_q8
sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks
from graph_timing import graph_time


E, D, I, TOP = 128, 2048, 768, 8
w13 = random_blocks(12, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
w2 = random_blocks(14, E * D, I, seed=2).cuda().view(E, D, -1)
gen = torch.Generator().manual_seed(0)
arms = {"pairs": lambda h, ids, wts: packed_q8.moe_pairs_q8(h, w13, 12, w2, 14, ids, wts),
        "float_grouped": lambda h, ids, wts: packed_moe._grouped(h, w13, 12, w2, 14, ids, wts)}
for bm, bn, warps in ((16, 64, 4), (16, 128, 4), (16, 32, 4), (32, 64, 4), (16, 64, 8), (64, 64, 4)):
    arms[f"mmq_m{bm}_n{bn}_w{warps}"] = (lambda h, ids, wts, c=dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps):
                                         packed_mmq.moe_grouped_q8(h, w13, 12, w2, 14, ids, wts, config=c))
rows = []
for tokens in (1, 4, 8, 16, 32, 64):
    hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
    id_sets = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(8)]
    wts = torch.rand(tokens, TOP, device="cuda")
    ref = arms["pairs"](hidden, id_sets[0], wts).float() if tokens * TOP <= 128 else None
    res = {}
    for name, fn in arms.items():
        if name == "pairs" and tokens * TOP > 128:
            continue
        try:
            if ref is not None and name.startswith("mmq"):
                err = ((fn(hidden, id_sets[0], wts).float() - ref).abs().max() / ref.abs().max()).item()
            else:
                err = None
            t = round(graph_time(lambda i, fn=fn: fn(hidden, id_sets[i], wts), len(id_sets)), 2)
        except Exception as e:  # a tiling that does not compile: say so, go on
            print(name, tokens, "failed:", repr(e)[:300], flush=True)
            continue
        res[name] = t
        rows.append(dict(tokens=tokens, arm=name, us=t, rel_err_vs_pairs=err))
    print("tokens", tokens, res, flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "mmq_ab.json"), "w"), indent=1)
