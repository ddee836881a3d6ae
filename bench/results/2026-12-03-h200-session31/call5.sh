# Session 31 call 5 (the device time left, ~140 s of command): packed_mm's GPU tests, then its timings against
# packed_q8 and dequantize + GEMM (three tilings) on the LM heads and the 30B-A3B's q_proj / o_proj.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 45 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_mm.py --tb=line -x > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|Error|passed|failed" $OUT/tests.log | head -5 | cut -c1-200
timeout -s INT $(( 130 - ($(date +%s)-S) )) python3 packed_mm_ab.py quick > $OUT/packed_mm_ab.txt 2>&1
echo "== ab rc=$? t=$(( $(date +%s)-S ))"; grep -E "rows=" $OUT/packed_mm_ab.txt | grep -v "==" | cut -c1-230
