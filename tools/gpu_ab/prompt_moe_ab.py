"""Packed routed experts at prompt sizes (16-512 tokens), inside CUDA graphs with cold routing (4 rotated id
sets): the 8-bit pairs (packed_q8.moe_pairs_q8: time grows with the pairs), packed_moe's float grouped kernels
(each used expert read once per row block) under a few tilings, the int8 tensor-core grouped kernel (packed_mmq:
Q4_K, Q6_K, Q8_0 and Q5_0 rows) and every expert dequantized to bf16 before fused_moe, on the 30B-A3B shape (128
experts of 768, top 8, Q4_K / Q6_K) and Qwen4-Exp's (512 experts of 640, top 10, Q4_K / Q8_0). Where the pairs stop
paying decides packed_moe.Q8_PAIRS_PER_EXPERT. GROUPED_ARMS=sweep: the float grouped tilings; GROUPED_ARMS=mmq:
packed_mmq's tilings on the 30B-A3B's, Qwen3-Next's and Qwen4-Exp's experts (packed_moe.MMQ_PAIRS_PER_EXPERT);
GROUPED_ARMS=base: the 8-bit pairs, the float grouped kernels' default tiling and every expert dequantized. Every
mode times the 8-bit pairs with ISUM=2 too (`q8_pairs_words`). Writes $OUT/prompt_moe_ab.json."""
import json
import os
import sys

import torch

from strata.kernels import packed_mmq, packed_moe, packed_q8

sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from expert_blocks import blocks  # noqa: E402
from graph_timing import graph_time  # noqa: E402


SHAPES = {"30b": (128, 2048, 768, 8, 12, 14), "qwen4exp": (512, 2560, 640, 10, 12, 8)}
MODE = os.environ.get("GROUPED_ARMS", "")
if MODE == "mmq":  # GROUPED_ARMS=mmq: packed_mmq's tilings against the dispatched paths, on the shapes it reads
    SHAPES = {"30b": SHAPES["30b"], "80b": (512, 2048, 512, 10, 12, 14), "qwen4exp": SHAPES["qwen4exp"]}
rows = []
gen = torch.Generator().manual_seed(0)
for shape, (E, D, I, TOP, q13, q2) in SHAPES.items():
    w13 = blocks(q13, E * 2 * I, D, seed=1).cuda().view(E, 2 * I, -1)
    w2 = blocks(q2, E * D, I, seed=2).cuda().view(E, D, -1)
    arms = {"q8_pairs": lambda h, ids, wts: packed_q8.moe_pairs_q8(h, w13, q13, w2, q2, ids, wts),
            # the same with a group's words in a loop (q8_steps.k_step ISUM=2, session 51)
            "q8_pairs_words": lambda h, ids, wts: packed_q8.moe_pairs_q8(h, w13, q13, w2, q2, ids, wts,
                                                                         config=dict(ISUM=2))}
    # GROUPED_ARMS=sweep: 16-row and 64-row blocks x (columns, warps) of the float grouped kernels
    sweep = MODE == "sweep"
    tilings = ([(bm, bn, w, 2) for bm in (16, 64) for bn, w in ((16, 8), (32, 8), (32, 4))] if sweep
               else [(None, 32, 4, 2)] if MODE in ("mmq", "base")
               else [(None, 32, 4, 2), (None, 64, 4, 2), (None, 64, 8, 3), (None, 128, 8, 3)])
    for bm, bn, warps, stages in tilings:
        c = dict(BLOCK_N=bn, num_warps=warps, num_stages=stages, **({"BLOCK_M": bm} if bm else {}))
        name = (f"grouped_m{bm}" if bm else "grouped") + f"_n{bn}_w{warps}_s{stages}"
        arms[name] = lambda h, ids, wts, c=c: packed_moe._grouped(h, w13, q13, w2, q2, ids, wts, config=c)
    # every expert dequantized to bf16, then fused_moe (what a capture of packed_moe's dequantized path does)
    if not sweep and MODE != "mmq":
        arms["dequant_all"] = lambda h, ids, wts: packed_moe._dequantized(h, w13, q13, w2, q2, ids, wts,
                                                                          every_expert=True)
    # packed_mmq's tilings: (BLOCK_M, BLOCK_N, warps)
    mmq_tilings = ([(16, 64, 4), (16, 32, 4), (16, 128, 4), (32, 64, 4)] if MODE == "mmq"
                   else [(16, 64, 4), (32, 64, 4), (64, 64, 4), (64, 128, 4)])
    if packed_mmq.supports(q2, I, w2) and not sweep and MODE != "base":
        for bm, bn, warps in mmq_tilings:
            c = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
            arms[f"mmq_m{bm}_n{bn}_w{warps}"] = (
                lambda h, ids, wts, c=c: packed_mmq.moe_grouped_q8(h, w13, q13, w2, q2, ids, wts, config=c))
    for tokens in [int(t) for t in os.environ.get("PROMPT_TOKENS", "16,32,64,128,256,512").split(",")]:
        hidden = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16) * 0.1
        id_sets = [torch.stack([torch.randperm(E, generator=gen)[:TOP] for _ in range(tokens)]).cuda()
                   for _ in range(4)]
        wts = torch.rand(tokens, TOP, device="cuda")
        ref = arms["q8_pairs"](hidden, id_sets[0], wts).float().sum(1)  # [T, D]: arms return partials or sums
        res = {}
        for name, fn in arms.items():
            try:
                got = fn(hidden, id_sets[0], wts).float()
                got = got if got.dim() == 2 else got.sum(1)
                err = ((got - ref).abs().max() / ref.abs().max()).item()
                t = round(graph_time(lambda i, fn=fn: fn(hidden, id_sets[i], wts), len(id_sets)), 1)
            except Exception as e:  # a tiling that does not compile or fit: say so, go on
                print(shape, name, tokens, "failed:", repr(e)[:200], flush=True)
                continue
            res[name] = t
            rows.append(dict(shape=shape, tokens=tokens, pairs=tokens * TOP, arm=name, us=t, rel_err_vs_pairs=err))
        best = min(res, key=res.get)
        print(f"{shape} {tokens:4d} tokens ({tokens * TOP} pairs): best {best} {res[best]} us; "
              + ", ".join(f"{k} {v}" for k, v in res.items()), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "prompt_moe_ab.json"), "w"), indent=1)
