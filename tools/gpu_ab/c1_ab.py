"""Single-stream decode A/B in one process (graphs recaptured per arm): the one-row SwiGLU kernel
(ops.skinny_mlp_on) and the skinny/cuBLAS GEMV switch (ops.SKINNY_MAX_WEIGHT). argv: MODEL [rounds]."""
import sys
from one_stream import decode_rate, engine, report
from strata.model import ops

path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
llm = engine(path)
skinny_mlp_on, max_weight = ops.skinny_mlp_on, ops.SKINNY_MAX_WEIGHT
arms = {"now": (skinny_mlp_on, max_weight), "no_mlp_kernel": (lambda *a: False, max_weight),
        "skinny_all_gemv": (skinny_mlp_on, 1 << 40), "neither": (lambda *a: False, 1 << 40)}
results, tokens = {name: [] for name in arms}, {}
for r in range(rounds):
    for name, (mlp_on, weight_max) in arms.items():
        ops.skinny_mlp_on, ops.SKINNY_MAX_WEIGHT = mlp_on, weight_max
        rate, ids = decode_rate(llm)
        results[name].append(rate)
        tokens.setdefault(name, ids)
report(results, tokens, "now")
