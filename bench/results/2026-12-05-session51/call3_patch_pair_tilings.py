"""Reads pairs_sweep.json and writes its best one-token tilings into a tree's packed_q8.py (ONE_TOKEN_GATE_UP,
ONE_TOKEN_DOWN), so the same device call can A/B the whole model with them (next_call38.sh).
usage: patch_pair_tilings.py SWEEP_JSON TREE; prints the tilings it wrote, or exits 1 where the sweep has none."""
import json
import re
import sys

rows = [r for r in json.load(open(sys.argv[1])) if r.get("tokens") == 1 and "gate_up_us" in r]
if not rows:
    sys.exit("no one-token rows in the sweep")
path = f"{sys.argv[2]}/strata/kernels/packed_q8.py"
source = open(path).read()
for name, key in (("ONE_TOKEN_GATE_UP", "gate_up_us"), ("ONE_TOKEN_DOWN", "down_us")):
    best = min(rows, key=lambda r: r[key])
    tiling = (f"{name} = dict(BLOCK_N={best['bn']}, SUPERBLOCKS={best['sb']}, num_warps={best['warps']}, "
              f"num_stages={best['stages']})")
    source, count = re.subn(rf"^{name} = dict\(.*\)$", tiling, source, flags=re.M)
    if count != 1:
        sys.exit(f"{name} not found in {path}")
    print(tiling, f"# {best[key]} us")
open(path, "w").write(source)
