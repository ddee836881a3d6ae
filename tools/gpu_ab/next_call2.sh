# Prepared in session 39 for the next session's second device call: packed_mmq.linear_q8 with K split among programs
# (SPLIT_K) on the 30B-A3B's attention projections at 5-16 rows, against packed_q8's GEMV and dequantize + GEMM
# (which ops.packed_linear takes there now: ~780 us of an 8-stream step's 3,655, session 39 call 4); then its GPU tests.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
LINEAR_SHAPES=30b_q_proj,30b_o_proj,30b_v_proj LINEAR_ROWS=5,8,16 timeout -s INT 200 python3 linear_mmq_ab.py \
  > $OUT/linear_split_k.txt 2>&1
echo "== linear ab rc=$? t=$(( $(date +%s)-S ))"; cut -c1-400 $OUT/linear_split_k.txt
timeout -s INT 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_mmq.py -k linear \
  > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
