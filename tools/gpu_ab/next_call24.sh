# Session 48, a short call on what device time was left: packed_q8_grouped's GPU tests and its tiling sweep against
# packed_q8's pairs (the 30B-A3B's experts at 8 and 64 tokens, Qwen4-Exp's at 64). next_call23.sh is the full call.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_packed_q8.py -k grouped \
  > $OUT/tests_grouped.log 2>&1
echo "== grouped GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_grouped.log | tail -5
TOKENS=8,64 timeout -s INT 100 python3 grouped_pairs_sweep.py > $OUT/grouped_pairs_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -v "^fail" $OUT/grouped_pairs_sweep.txt | cut -c1-220 | head -14
SHAPE=q4e TOKENS=64 timeout -s INT 60 python3 grouped_pairs_sweep.py > $OUT/grouped_pairs_sweep_q4e.txt 2>&1
echo "== sweep q4e rc=$? t=$(( $(date +%s)-S ))"; grep -v "^fail" $OUT/grouped_pairs_sweep_q4e.txt | cut -c1-220 | head -8
