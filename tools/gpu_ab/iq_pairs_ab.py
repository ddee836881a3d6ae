"""Session 53: the i-quants' packed MoE (packed_moe.packed_moe: the 8-bit pairs up to 4 pairs an expert, then the float
grouped kernels) on the 30B-A3B's experts (128 of 768, top 8), timed whole in CUDA graphs over 8 rotated routings,
for the tree on PYTHONPATH: run it from two trees in turn (a code book row of 8 read as one 8-byte load, against two
4-byte loads). Q4_K / Q6_K is the control.
IQ_PAIRS (e.g. "21:21,17:21") picks the (gate/up, down) types. Prints one line per (types, tokens):
`ARM qtypes tokens us`."""
import os, sys, torch
from strata.kernels.packed_moe import packed_moe
sys.path.insert(0, "tests/kernels")
from test_packed_gemv import random_blocks
from graph_timing import graph_time

E, D, I, TOP = 128, 2048, 768, 8
arm = os.environ.get("ARM", "?")
gen = torch.Generator().manual_seed(0)
pairs = os.environ.get("IQ_PAIRS", "16:18,17:21,22:22,19:29,12:14")
for q13, q2 in (tuple(int(q) for q in p.split(":")) for p in pairs.split(",")):
    w13 = random_blocks(q13, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
    w2 = random_blocks(q2, E * D, I, seed=2).cuda().view(E, D, -1)
    for tokens in (1, 8, 64, 256):
        hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
        ids = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(8)]
        wts = torch.rand(tokens, TOP, device="cuda")
        us = graph_time(lambda i: packed_moe(hidden, w13, q13, w2, q2, ids[i], wts), 8)
        print(arm, (q13, q2), tokens, round(us, 2), flush=True)
