# For a later call of the next session (prepared in session 51, ~8 minutes). Session 51's pairs sweep (an H100) timed
# the 8-bit pairs' down launch at 8 tokens 39.61 us with 16 rows of W, 1 superblock a step and 2 warps against 42.75
# for PAIR_CONFIG (16, 2, 1), and found nothing better at 64 tokens. (1) The sweep at 2 / 4 / 16 / 32 tokens around
# those tilings. (2) Issue 23's c8 / c16 with down at (16, 1, 2) for steps of 2-16 tokens (`few` arm: a patched copy of
# the tree) against HEAD, two alternated rounds.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
PAIRS_TOKENS=2,4,16,32 PAIRS_BN=8,16 PAIRS_SB=1,2,4 PAIRS_WARPS=1,2 PAIRS_STAGES=3 timeout -s INT 150 \
  python3 pairs_sweep.py > $OUT/pairs_sweep.txt 2>&1; echo "== sweep rc=$? t=$(( $(date +%s)-S ))"
grep -E "^tokens" $OUT/pairs_sweep.txt | cut -c1-160
mkdir -p /tmp/few && tar -xf $OLDPWD/.base/src.tar -C /tmp/few
python3 - <<'PY' > $OUT/patched.txt 2>&1; echo "== patch rc=$?"; cat $OUT/patched.txt
path = "/tmp/few/strata/kernels/packed_q8.py"
s = open(path).read()
old = "    if num_tokens == 1:\n        return ONE_TOKEN_GATE_UP, ONE_TOKEN_DOWN\n"
new = old + ("    if num_tokens <= 16:\n        k_m = qtype13 in (Q4_K, Q5_K) and qtype2 in (Q4_K, Q5_K, Q6_K)\n"
             "        return (PAIRS_GATE_UP if k_m else PAIR_CONFIG), "
             "dict(BLOCK_N=16, SUPERBLOCKS=1, num_warps=2, num_stages=3)\n")
assert s.count(old) == 1, "pair_configs changed: update the patch"
open(path, "w").write(s.replace(old, new))
print("patched pair_configs: down (16, 1, 2) at 2-16 tokens")
PY
quantize_q4km
bench_arms 2 8,16 src few
