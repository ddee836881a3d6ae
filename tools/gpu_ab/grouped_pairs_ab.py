"""Session 54: q8_grouped_pairs (the 8-bit pairs grouped by expert in blocks of ROWS, each expert's rows unpacked once
a block) against packed_moe's default paths (the 8-bit pairs up to 4 pairs an expert, then packed_mmq for Q4_K / Q6_K
or the float grouped kernels) on the 30B-A3B's experts (128 of 768, top 8) at 16-96 tokens (1-6 pairs an expert),
timed whole in CUDA graphs over 8 rotated routings (graph_timing). Arms in one process, alternated: `default`, then
`gARM` (STRATA_GROUPED_PAIRS=1 at the tiling ARM: ROWS, or ROWS:BLOCK_N:SUPERBLOCKS:WARPS:ISUM; keys left out as
committed). IQ_PAIRS picks the (gate/up, down) types (default: Q4_K / Q6_K, IQ3_XXS / Q3_K as iq3_xxs files have
them, IQ2_XXS / IQ3_XXS); GROUPED_TOKENS the token counts; GROUPED_ARMS the tilings (default "4,8"). Prints `arm qtypes tokens us` lines, then each (qtypes, tokens)'s best
grouped arm against default."""
import os, sys, torch
from strata.kernels import q8_grouped_pairs
from strata.kernels.packed_moe import packed_moe
sys.path.insert(0, "tests/kernels")
from test_packed_gemv import random_blocks
from graph_timing import graph_time

E, D, I, TOP = 128, 2048, 768, 8
gen = torch.Generator().manual_seed(0)
pairs = os.environ.get("IQ_PAIRS", "12:14,18:11,16:18")
tokens_list = [int(t) for t in os.environ.get("GROUPED_TOKENS", "16,32,64,96").split(",")]
arms = os.environ.get("GROUPED_ARMS", "4,8").split(",")
KEYS = ("ROWS", "BLOCK_N", "SUPERBLOCKS", "num_warps", "ISUM")
base = dict(q8_grouped_pairs.CONFIG)
results = {}
for q13, q2 in (tuple(int(q) for q in p.split(":")) for p in pairs.split(",")):
    w13 = random_blocks(q13, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
    w2 = random_blocks(q2, E * D, I, seed=2).cuda().view(E, D, -1)
    for tokens in tokens_list:
        hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
        ids = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda() for _ in range(8)]
        wts = torch.rand(tokens, TOP, device="cuda")
        for round_ in range(2):
            for arm in ["default", *(f"g{a}" for a in arms)]:
                if arm == "default":
                    os.environ.pop("STRATA_GROUPED_PAIRS", None)
                else:
                    os.environ["STRATA_GROUPED_PAIRS"] = "1"
                    q8_grouped_pairs.CONFIG = {**base, **dict(zip(KEYS, (int(v) for v in arm[1:].split(":"))))}
                us = graph_time(lambda i: packed_moe(hidden, w13, q13, w2, q2, ids[i], wts), 8)
                results.setdefault(((q13, q2), tokens, arm), []).append(us)
                print(arm, (q13, q2), tokens, round(us, 2), flush=True)
for (qtypes, tokens, arm), times in sorted(results.items()):
    if arm != "default":
        print("best", qtypes, tokens, arm, round(min(times), 2), "against default",
              round(min(results[(qtypes, tokens, "default")]), 2))
