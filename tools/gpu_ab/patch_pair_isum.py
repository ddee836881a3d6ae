"""Reads pairs_sweep.json (run with PAIRS_ISUM=0,1,2 and PAIRS_TOKENS=1,8,64) and writes into a tree's packed_q8.py
each pairs launch's (gate/up, down) fastest tiling and K-step sums (ISUM): at one token (ONE_TOKEN_*), and for several
tokens (PAIRS_*) the one with the least time at 8 and 64 tokens together, so the same device call can A/B the whole
model with them (next_call45.sh ran it in session 52). usage: patch_pair_isum.py SWEEP_JSON TREE; prints what it
chose, or exits 1 where the tree's own tilings win everywhere (nothing to A/B)."""
import json
import re
import sys

sys.path.insert(0, sys.argv[2])
from strata.kernels import packed_q8  # noqa: E402  (the tree's own tilings)

rows = [r for r in json.load(open(sys.argv[1])) if "gate_up_us" in r]


def tiling_of(r: dict) -> tuple:
    return r["bn"], r["sb"], r["warps"], r["stages"], r["isum"]


def current(cfg: dict) -> tuple:
    return cfg["BLOCK_N"], cfg["SUPERBLOCKS"], cfg["num_warps"], cfg["num_stages"], cfg.get("ISUM", 0)


def best(key: str, token_counts: tuple, now: tuple) -> tuple:
    """The tiling + ISUM with the least summed time at these token counts (timed at all of them)."""
    totals = {}
    for r in rows:
        if r["tokens"] in token_counts:
            totals.setdefault(tiling_of(r), {})[r["tokens"]] = r[key]
    complete = {t: sum(v.values()) for t, v in totals.items() if len(v) == len(token_counts)}
    choice = min(complete, key=complete.get)
    print(f"{key} at {token_counts} tokens: {choice} {complete[choice]:.2f} us, now {now} {complete.get(now)} us")
    return choice


def config(t: tuple) -> str:
    return f"dict(BLOCK_N={t[0]}, SUPERBLOCKS={t[1]}, num_warps={t[2]}, num_stages={t[3]}, ISUM={t[4]})"


launches = {"ONE_TOKEN_GATE_UP": ("gate_up_us", (1,)), "ONE_TOKEN_DOWN": ("down_us", (1,)),
            "PAIRS_GATE_UP": ("gate_up_us", (8, 64)), "PAIRS_DOWN": ("down_us", (8, 64))}
nows = {name: current(getattr(packed_q8, name)) for name in launches}
choices = {name: best(key, tokens, nows[name]) for name, (key, tokens) in launches.items()}
if choices == nows:
    sys.exit("the tree's own tilings are fastest everywhere")
path = f"{sys.argv[2]}/strata/kernels/packed_q8.py"
source = open(path).read()
for name in launches:
    source, count = re.subn(rf"^{name} = dict\(.*\)(  #.*)?$", f"{name} = {config(choices[name])}", source, flags=re.M)
    assert count == 1, name
open(path, "w").write(source)
print("patched", path)
