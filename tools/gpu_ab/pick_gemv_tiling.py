"""From gemv_rows_sweep.py's json, default_config's tiling at 5-8 rows of x for narrow weights (n <= 1,024: the
30B-A3B's k_proj / v_proj) and for wider ones (q_proj / o_proj): per group the tiling with the least summed time at
8 rows, written into TREE/strata/kernels/packed_q8.py in place of the one 5-8-row tiling, when it beats that by
3 % or more. Prints both; exits 1 when nothing beat the default (the tree is left as it was).
Usage: pick_gemv_tiling.py SWEEP_JSON TREE"""
import json
import re
import sys

GROUPS = {"narrow": ("30b_k_proj r8", "30b_v_proj r8"), "wide": ("30b_q_proj r8", "30b_o_proj r8")}
LINE = "        bn, sb, warps = 4, 2, 2\n"

results = json.load(open(sys.argv[1]))["results"]
chosen = {}
for group, keys in GROUPS.items():
    times = [results[k] for k in keys]
    names = [a for a in times[0] if re.fullmatch(r"n\d+_s\d+_w\d+", a)
             and all(isinstance(t.get(a), float) for t in times)]
    total = {a: sum(t[a] for t in times) for a in names}
    best = min(total, key=total.get)
    default = sum(t["default"] for t in times)
    print(f"{group}: best {best} {total[best]:.2f} us against default {default:.2f} ({' + '.join(keys)})")
    if total[best] <= 0.97 * default:
        chosen[group] = tuple(int(v) for v in re.findall(r"\d+", best))
if not chosen:
    sys.exit(1)
path = f"{sys.argv[2]}/strata/kernels/packed_q8.py"
source = open(path).read()
assert source.count(LINE) == 1, "default_config's 5-8-row tiling line moved"
narrow, wide = chosen.get("narrow", (4, 2, 2)), chosen.get("wide", (4, 2, 2))
open(path, "w").write(source.replace(LINE, f"        bn, sb, warps = {narrow} if n <= 1024 else {wide}\n"))
print(f"patched {path}: narrow {narrow}, wide {wide}")
