"""Routed experts of the 30B-A3B shape (128 experts of 768, top 8, Q4_K gate/up, Q6_K down) for prompt-sized steps
(16-128 tokens: 1-8 pairs an expert), inside CUDA graphs with cold routing (8 rotated id sets): the 8-bit pairs
(dispatched up to packed_moe.Q8_PAIRS_PER_EXPERT pairs an expert) and packed_mmq.moe_grouped_q8 at its default
tiling, from the tree it runs in. One line a size, labelled $ARM (session 58: packed_mmq's epilogue per sub-block
pair against the commit before it)."""
import json, os, sys, torch
from strata.kernels import packed_mmq, packed_q8
sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks
from graph_timing import graph_time

E, D, I, TOP = 128, 2048, 768, 8
w13 = random_blocks(12, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
w2 = random_blocks(14, E * D, I, seed=2).cuda().view(E, D, -1)
gen = torch.Generator().manual_seed(0)
arm = os.environ.get("ARM", "tree")
for tokens in (16, 32, 64, 96, 128):
    hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
    id_sets = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(8)]
    wts = torch.rand(tokens, TOP, device="cuda")
    pairs = packed_q8.moe_pairs_q8(hidden, w13, 12, w2, 14, id_sets[0], wts)
    mmq = packed_mmq.moe_grouped_q8(hidden, w13, 12, w2, 14, id_sets[0], wts)
    err = ((mmq - pairs).abs().max() / pairs.abs().max()).item()
    res = {name: round(graph_time(lambda i, fn=fn: fn(hidden, id_sets[i], wts), len(id_sets)), 1)
           for name, fn in (("pairs", lambda h, ids, w: packed_q8.moe_pairs_q8(h, w13, 12, w2, 14, ids, w)),
                            ("mmq", lambda h, ids, w: packed_mmq.moe_grouped_q8(h, w13, 12, w2, 14, ids, w)))}
    print(json.dumps(dict(arm=arm, tokens=tokens, pairs_per_expert=tokens * TOP / E, **res, mmq_rel_err=err)),
          flush=True)
