"""One-stream decode A/B of a STRATA_* debug switch in one process (graphs recaptured per arm, arms alternated a
round at a time): `env_ab.py MODEL NAME[=VALUE] [rounds] [FIELD=VALUE ...]` runs with STRATA_NAME unset and set to
VALUE (1 unless given), e.g. FUSED_PLE or ATTN_MIN_TILES=4; FIELD=VALUE: ExpertConfig fields (expert_cache=25%
cpu_threads=16 expert_swap_interval=0 for offload).
Prints each arm's median tok/s over 256 decode steps after a 64-token prompt, and whether the greedy tokens match."""
import os, sys
from one_stream import decode_rate, engine, report

path, (name, _, set_to) = sys.argv[1], ("STRATA_" + sys.argv[2]).partition("=")
rounds = int(sys.argv[3]) if len(sys.argv) > 3 and "=" not in sys.argv[3] else 3
experts = {k: int(v) if v.isdigit() else v for k, v in (a.split("=", 1) for a in sys.argv[3:] if "=" in a)}
llm = engine(path, **experts)
arms = {"unset": None, f"{name}={set_to or 1}": set_to or "1"}
results, tokens = {arm: [] for arm in arms}, {}
for r in range(rounds):
    for arm, value in arms.items():
        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        rate, ids = decode_rate(llm)
        results[arm].append(rate)
        tokens.setdefault(arm, ids)
os.environ.pop(name, None)
report(results, tokens, "unset")
