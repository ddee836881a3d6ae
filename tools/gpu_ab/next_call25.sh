# Session 48's last device seconds: packed_q8_grouped's GPU tests on Q4_K / Q6_K and Q4_K / Q8_0 experts, then its
# sweep against packed_q8's pairs at 64 and 8 tokens of the 30B-A3B's experts (output kept as it goes).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 50 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_packed_q8.py -k "grouped and (qtypes0 or qtypes1)" \
  > $OUT/tests_grouped.log 2>&1
echo "== grouped GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_grouped.log | tail -4
TOKENS=64,8 timeout -s INT 120 python3 grouped_pairs_sweep.py > $OUT/grouped_pairs_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -v "^fail" $OUT/grouped_pairs_sweep.txt | cut -c1-220 | head -14
