"""From gemv_rows_sweep.py's json, the best tilings for default_config: per rows of x in the sweep, for narrow
weights (n <= 1,024: the 30B-A3B's k_proj / v_proj) and for wider ones (q_proj / o_proj, together and each alone),
the four tilings with the least summed time beside the default's. Session 56's version wrote the 8-row picks
into a tree; session 57 put its picks into default_config by hand (the 1-, 4- and 8-row lines).
Usage: pick_gemv_tiling.py SWEEP_JSON"""
import json
import re
import sys

GROUPS = {"narrow": ("30b_k_proj", "30b_v_proj"), "wide": ("30b_q_proj", "30b_o_proj"),
          "q_proj": ("30b_q_proj",), "o_proj": ("30b_o_proj",)}

results = json.load(open(sys.argv[1]))["results"]
rows_seen = sorted({key.rsplit(" r", 1)[1] for key in results}, key=int)
for rows in rows_seen:
    for group, names in GROUPS.items():
        times = [results.get(f"{name} r{rows}") for name in names]
        if None in times:
            continue
        arms = [a for a in times[0] if re.fullmatch(r"n\d+_s\d+_w\d+", a) and all(isinstance(t.get(a), float)
                                                                                 for t in times)]
        total = {a: sum(t[a] for t in times) for a in arms}
        best = sorted(total, key=total.get)[:4]
        default = sum(t["default"] for t in times)
        print(f"rows {rows} {group}: default {default:.2f} us; " + ", ".join(f"{a} {total[a]:.2f}" for a in best))
