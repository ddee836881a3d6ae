# For the next session (prepared in session 51, ~7 minutes; say which card). How the 8-bit pairs' K steps sum
# (q8_steps.k_step's ISUM, a pairs config key): 0 (today) scales each word's dp4a in float; 1 sums a scale group's
# words in integers first (what the GEMV does for several rows); 2 takes Q4_K's / Q6_K's words of a group in a loop.
# Compiled for sm_90 on the development VM as a launch specializes them (tools/triton_sass_stats.py), the 30B-A3B's
# gate/up at PAIR_CONFIG (16, 2, 1): 1,760 SASS instructions and 255 registers (ISUM 0), 1,328 and 159 (1, the same
# 128-bit loads), 960 and 80 (2, but only 32-bit loads: its lanes run along rows of W, so a warp's load touches up to
# 32 cache lines for 4 bytes each, and L1 may become the limit); one token (1, 8, 1): 624 / 528 / 464. Session 50's
# Nsight run found the 64-token prompt's pairs bound by instructions at 255 registers (most of c1's 17 ms TTFT).
# The same count puts (8, 4, 1) at ISUM 1 lowest: 1,200 instructions, 148 registers, 9.4 a dp4a (13.8 today).
# (1) The GPU tests of ISUM 1 and 2. (2) pairs_sweep at 1 / 8 / 64 tokens, ISUM 0, 1 and 2. (3) Issue 23's c1 / c8 /
# c16 with each launch's fastest tiling and ISUM (one token; 8 + 64 tokens for the rest: `words`,
# patch_pair_isum.py on a copy of the tree) against HEAD, two alternated rounds, JSONs kept; skipped where today's
# tilings win everywhere.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 120 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "integer_group_sums" \
  -p no:cacheprovider > $OUT/tests.log 2>&1; echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests.log | cut -c1-300
PAIRS_TOKENS=1,8,64 PAIRS_BN=1,4,8,16 PAIRS_SB=2,4,8 PAIRS_WARPS=1 PAIRS_STAGES=3 PAIRS_ISUM=0,1,2 timeout -s INT 200 \
  python3 pairs_sweep.py > $OUT/pairs_sweep.txt 2>&1; echo "== sweep rc=$? t=$(( $(date +%s)-S ))"
grep -E "^tokens|best" $OUT/pairs_sweep.txt | cut -c1-160
mkdir -p /tmp/words && tar -xf $OLDPWD/.base/src.tar -C /tmp/words
python3 patch_pair_isum.py $OUT/pairs_sweep.json /tmp/words > $OUT/patched.txt 2>&1
R=$?; cat $OUT/patched.txt; [ $R = 0 ] || { echo "== today's tilings fastest everywhere: no whole-model A/B"; exit 0; }
quantize_q4km
bench_arms 2 1,8,16 src words
