"""The 30B-A3B's routed experts at Q4_K_M (128 of 768, top 8, Q4_K gate/up, Q6_K down; SHAPE=q4e: Qwen4-Exp's) at
2 / 8 / 16 / 64 tokens (TOKENS=...):
packed_q8.moe_pairs_q8 (an expert read once per pair) against packed_q8_grouped (once per block of its pairs) over
tilings, each whole call (routing layout, roundings, both launches) timed inside CUDA graphs with 8 rotated
routings (cold L2). Prints the best tilings and writes $OUT/grouped_pairs_sweep.json."""
import itertools, json, os, sys, torch
from strata.kernels import packed_q8 as pq
from strata.kernels.packed_q8_grouped import moe_grouped_pairs_q8
sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks
from graph_timing import graph_time

# SHAPE=q4e: Qwen4-Exp's experts instead (512 of 640, top 10, Q4_K gate/up, Q8_0 down rows of 640)
E, D, I, TOP, Q13, Q2 = (512, 2560, 640, 10, 12, 8) if os.environ.get("SHAPE") == "q4e" else (128, 2048, 768, 8, 12, 14)
w13 = random_blocks(Q13, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
w2 = random_blocks(Q2, E * D, I, seed=2).cuda().view(E, D, -1)
gen = torch.Generator().manual_seed(0)
rows = []
tokens_list = [int(t) for t in os.environ.get("TOKENS", "2,8,16,64").split(",")]
for tokens in tokens_list:
    hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
    ids = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(8)]
    wts = torch.rand(tokens, TOP, device="cuda")
    base = graph_time(lambda i: pq.moe_pairs_q8(hidden, w13, Q13, w2, Q2, ids[i], wts), 8)
    ref = pq.moe_pairs_q8(hidden, w13, Q13, w2, Q2, ids[0], wts)
    print(f"tokens {tokens}: pairs {base:.1f} us", flush=True)
    mine = []
    for bm, bn, sb, warps in itertools.product((2, 4, 8, 16), (4, 8, 16), (1, 2), (1, 2)):
        if bm * bn > 128 or bm > max(2, 2 * tokens * TOP // E):
            continue
        cfg = dict(BLOCK_M=bm, BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3)
        try:
            out = moe_grouped_pairs_q8(hidden, w13, Q13, w2, Q2, ids[0], wts, config=cfg)
            err = float((out - ref).abs().max() / ref.abs().max())
            t = graph_time(lambda i: moe_grouped_pairs_q8(hidden, w13, Q13, w2, Q2, ids[i], wts, config=cfg), 8)
        except Exception as e:  # noqa: BLE001
            print("fail", cfg, repr(e)[:200], flush=True)
            continue
        mine.append(dict(tokens=tokens, pairs_us=round(base, 2), grouped_us=round(t, 2), rel_err=err, **cfg))
    mine.sort(key=lambda r: r["grouped_us"])
    for r in mine[:4]:
        print("  ", r, flush=True)
    rows += mine
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), f"grouped_pairs_sweep_{os.environ.get('SHAPE', '30b')}.json"), "w"), indent=1)
