"""Summarise spec_steps.py's JSONL: per run, decode vs admitting steps (count, wall, phases, paths)."""
import json, sys
from collections import OrderedDict, Counter
runs = OrderedDict()
for line in open(sys.argv[1]):
    r = json.loads(line); runs.setdefault(r["run"], []).append(r)
for i, (rid, steps) in enumerate(runs.items()):
    if len(steps) < 10: continue
    spec = any(w > 1 for s in steps for w in s["wins"])
    maxslots = max(s["slots"] for s in steps)
    tok = sum(s["committed"] for s in steps)
    span = steps[-1]["t"] - steps[0]["t"] + steps[0]["wall"]
    print(f"run {i} {'spec' if spec else 'none'} max_slots {maxslots} steps {len(steps)} tokens {tok} span {span*1e3:.1f} ms -> {tok/span:.0f} tok/s")
    for kind in ("decode", "admit"):
        ss = [s for s in steps if bool(s["prompts"]) == (kind == "admit")]
        if not ss: continue
        n = len(ss); W = sum(s["wall"] for s in ss)
        f = sum(s["fwd"] for s in ss); sm = sum(s["smp"] for s in ss); d = sum(s["drf"] for s in ss)
        paths = Counter(p if not p.startswith("eager") else "eager" for s in ss for p in s["path"])
        ntok = sum(s["committed"] for s in ss)
        print(f"   {kind:6s} n {n:4d} wall {W*1e3:8.1f} ms ({W/n*1e3:.2f}/step) fwd {f/n*1e3:.2f} smp {sm/n*1e3:.2f} drf {d/n*1e3:.2f} host {(W-f-sm-d)/n*1e3:.2f}  committed {ntok}  prompts {sum(len(s['prompts']) for s in ss)}")
        print(f"          paths {dict(paths.most_common(8))}")
