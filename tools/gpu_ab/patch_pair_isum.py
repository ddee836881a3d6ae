"""Reads pairs_sweep.json (run with PAIRS_ISUM=0,1,2) and writes into a tree's packed_q8.py, for each launch of the
pairs (gate/up, down) at one token (ONE_TOKEN_*) and at several (PAIR_CONFIG's tiling, timed at 64 tokens), the
K-step sums (ISUM) that timed fastest at that launch's own tiling, so the same device call can A/B the whole model
with them (next_call45.sh). usage: patch_pair_isum.py SWEEP_JSON TREE; prints what it chose, or exits 1 where ISUM
0 wins everywhere (nothing to A/B)."""
import json
import re
import sys

sys.path.insert(0, sys.argv[2])
from strata.kernels import packed_q8  # noqa: E402  (the tree's own tilings)

rows = [r for r in json.load(open(sys.argv[1])) if "gate_up_us" in r]


def best_isum(tokens: int, key: str, cfg: dict) -> int:
    """The fastest ISUM at `tokens` for the launch timed under `key`, at cfg's tiling (0 where none was timed)."""
    tiling = (cfg["BLOCK_N"], cfg["SUPERBLOCKS"], cfg["num_warps"], cfg["num_stages"])
    timed = {r["isum"]: r[key] for r in rows if r["tokens"] == tokens
             and (r["bn"], r["sb"], r["warps"], r["stages"]) == tiling}
    choice = min(timed, key=timed.get) if timed else 0
    print(f"{tokens} tokens {key} at {tiling}: {timed} -> ISUM {choice}")
    return choice


one_gu = best_isum(1, "gate_up_us", packed_q8.ONE_TOKEN_GATE_UP)
one_dn = best_isum(1, "down_us", packed_q8.ONE_TOKEN_DOWN)
many_gu = best_isum(64, "gate_up_us", packed_q8.PAIR_CONFIG)
many_dn = best_isum(64, "down_us", packed_q8.PAIR_CONFIG)
if not any((one_gu, one_dn, many_gu, many_dn)):
    sys.exit("ISUM 0 is fastest everywhere")
path = f"{sys.argv[2]}/strata/kernels/packed_q8.py"
source = open(path).read()
for name, isum in (("ONE_TOKEN_GATE_UP", one_gu), ("ONE_TOKEN_DOWN", one_dn)):
    source, count = re.subn(rf"^({name} = dict\(.*)\)$", rf"\1, ISUM={isum})", source, flags=re.M)
    assert count == 1, name
old = "        return PAIR_CONFIG, PAIR_CONFIG\n"
assert source.count(old) == 1, "pair_configs changed: update this patch"
source = source.replace(old, f"        return {{**PAIR_CONFIG, 'ISUM': {many_gu}}}, {{**PAIR_CONFIG, 'ISUM': {many_dn}}}\n")
open(path, "w").write(source)
print("patched", path)
