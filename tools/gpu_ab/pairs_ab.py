"""One-stream decode A/B of the 8-bit MoE pairs' one-token tilings, in one process (graphs recaptured per arm,
arms alternated a round at a time). argv: MODEL (a packed GGUF) [rounds]. Prints each arm's median tok/s over
256 decode steps (after a 64-token prompt) and the runs; the greedy tokens of every arm must be the same."""
import sys
from one_stream import decode_rate, engine, report
from strata.kernels import packed_q8 as pq

path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
llm = engine(path)


def tiling(bn, sb, warps):
    return dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3)


shipped = pq.pair_configs
arms = {  # name -> (gate/up tiling, down tiling) for one token; None: what the commit ships
    "shipped": None,
    "gu4x2w1_dn8x1w1": (tiling(4, 2, 1), tiling(8, 1, 1)),
    "gu4x2w1_dn8x2w1": (tiling(4, 2, 1), tiling(8, 2, 1)),
    "gu16x2w1_dn16x2w1": (tiling(16, 2, 1), tiling(16, 2, 1)),
    "gu8x1w2_dn8x1w1": (tiling(8, 1, 2), tiling(8, 1, 1)),
}
results, tokens = {name: [] for name in arms}, {}
for r in range(rounds):
    for name, pair in arms.items():
        pq.pair_configs = shipped if pair is None else (
            lambda n, q2, q13, pair=pair: pair if n == 1 else shipped(n, q2, q13))
        rate, ids = decode_rate(llm)
        results[name].append(rate)
        tokens.setdefault(name, ids)
pq.pair_configs = shipped
report(results, tokens, "shipped")
