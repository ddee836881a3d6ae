"""packed_q8's MoE pairs, each launch timed alone (gate/up, the activation rounding, down) over tilings, at
1 / 8 / 16 tokens of the 30B-A3B experts (128 of 768, top 8, Q4_K gate/up, Q6_K down), inside CUDA graphs with
8 rotated routings (cold L2). Writes $OUT/pairs_sweep.json: which tiling each token count should take.
Knobs (comma lists): PAIRS_TOKENS (1,8,16), PAIRS_BN (4,8,16,32), PAIRS_SB (1,2), PAIRS_WARPS (1,2,4), PAIRS_STAGES
(2,3), PAIRS_ISUM (0; q8_steps.k_step's ISUM: 1 integer sums per scale group, 2 Q4_K's words in a loop), PAIRS_Q13 /
PAIRS_Q2 (12 / 14: gate/up's and down's GGUF types, e.g. 16 / 18 for IQ2_XXS / IQ3_XXS); tilings with
BLOCK_N x SB above 32 or BLOCK_N x warps above 64 are skipped. Session 50's Nsight run found a one-token gate/up at
0.73 waves of one-warp programs, stalled on loads (session 51: one row of W and 8 superblocks a step won), and a
64-token prompt's at 255 registers, bound by instructions: PAIRS_ISUM=0,2 asks whether Q4_K's word loop pays."""
import itertools, json, os, sys, torch
from strata.kernels import packed_q8 as pq
sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks
from graph_timing import graph_time

E, D, I, TOP = 128, 2048, 768, 8
Q13, Q2 = int(os.environ.get("PAIRS_Q13", "12")), int(os.environ.get("PAIRS_Q2", "14"))  # gate/up's, down's types
w13 = random_blocks(Q13, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
w2 = random_blocks(Q2, E * D, I, seed=2).cuda().view(E, D, -1)
gen = torch.Generator().manual_seed(0)
rows = []
knob = lambda name, default: [int(v) for v in os.environ.get(name, default).split(",")]
for tokens in knob("PAIRS_TOKENS", "1,8,16"):
    hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
    id_sets = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).reshape(-1).cuda()
               for _ in range(8)]
    wts = torch.rand(tokens * TOP, device="cuda")
    hidden_q = pq.quantize(hidden)
    act = torch.randn(tokens * TOP, I, device="cuda") * 0.05
    act_q = pq.quantize(act)
    out = torch.empty(tokens, TOP, D, device="cuda")
    res = {"quantize_act": round(graph_time(lambda i: pq.quantize(act), 8), 2)}
    for bn, sb, warps, stages, isum in itertools.product(
            knob("PAIRS_BN", "4,8,16,32"), knob("PAIRS_SB", "1,2"), knob("PAIRS_WARPS", "1,2,4"),
            knob("PAIRS_STAGES", "2,3"), knob("PAIRS_ISUM", "0")):
        if bn * warps > 64 or bn * sb > 32:
            continue
        cfg = dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=stages, ISUM=isum)
        try:
            gu = lambda i: pq.gate_up_pairs(hidden_q, w13, Q13, id_sets[i], TOP, act, cfg)
            dn = lambda i: pq.down_pairs(act_q, w2, Q2, id_sets[i], wts, out, cfg)
            t_gu, t_dn = graph_time(gu, 8), graph_time(dn, 8)
        except Exception as e:  # noqa: BLE001
            print("fail", bn, sb, warps, stages, isum, repr(e)[:200], flush=True)
            continue
        rows.append(dict(tokens=tokens, bn=bn, sb=sb, warps=warps, stages=stages, isum=isum,
                         gate_up_us=round(t_gu, 2), down_us=round(t_dn, 2)))
    mine = [r for r in rows if r["tokens"] == tokens]
    cfg13, cfg2 = pq.pair_configs(tokens, Q2, Q13)
    tiling = lambda c: (c["BLOCK_N"], c["SUPERBLOCKS"], c["num_warps"], c["num_stages"], c.get("ISUM", 0))
    cur_gu = [r["gate_up_us"] for r in mine if (r["bn"], r["sb"], r["warps"], r["stages"], r["isum"]) == tiling(cfg13)]
    cur_dn = [r["down_us"] for r in mine if (r["bn"], r["sb"], r["warps"], r["stages"], r["isum"]) == tiling(cfg2)]
    print("tokens", tokens, res, "current gate_up", tiling(cfg13), cur_gu, "down", tiling(cfg2), cur_dn, flush=True)
    for key in ("gate_up_us", "down_us"):
        for r in sorted(mine, key=lambda r: r[key])[:5]:
            print("   best", key, r, flush=True)
    rows.append(dict(tokens=tokens, **res))
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "pairs_sweep.json"), "w"), indent=1)
