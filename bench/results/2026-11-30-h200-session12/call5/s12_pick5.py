"""Device-only: keep the one-token gate/up kernel only if the sweep measured it >= 3 us faster per replay than
off; write the choice (on + the best config, or off) into strata/kernels/fused_moe.py of the device's copy."""
import json, os, re, statistics, sys
res = json.load(open(os.path.join(os.environ["OUT"], "tune_5.json")))
med = {k: statistics.median(v["replay"]) for k, v in res.items() if v["replay"]}
variants = json.load(open(".devscripts/s12_variants5.json"))
tests_ok = sys.argv[1] == "0"
best = min((k for k in med if k != "gu_off"), key=med.get, default=None)
on = tests_ok and best is not None and "gu_off" in med and med[best] < med["gu_off"] - 0.003
p = "strata/kernels/fused_moe.py"
s = open(p).read()
if on:
    cfg = dict(BLOCK_N=16, BLOCK_K=256, num_warps=8) | variants[best].get("gu1_cfg", {})
    s = re.sub(r"GATE_UP_ONE_TOKEN_CONFIG = dict\(.*\)", "GATE_UP_ONE_TOKEN_CONFIG = dict(BLOCK_N=%d, BLOCK_K=%d, num_warps=%d)"
               % (cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["num_warps"]), s)
else:
    s = s.replace("GATE_UP_ONE_TOKEN = True", "GATE_UP_ONE_TOKEN = False")
open(p, "w").write(s)
print("medians", {k: round(v, 4) for k, v in med.items()}, "tests ok", tests_ok, "-> one-token gate/up", "ON " + best if on else "OFF")
print([l for l in s.split("\n") if l.startswith("GATE_UP_ONE_TOKEN")])
