# session 12, call 3: one token's down projection sums its k experts in the kernel (the next norm reads one row): tests; sweep; c1 bench
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
echo "== tests"; timeout 200 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -k "moe or norm or graph or down" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== tune 64"; TAG=3 timeout 280 python3 .devscripts/s10_tune.py "$(cat .devscripts/s12_variants3.json)" 4 > $OUT/tune3.log 2>&1; echo rc=$?
grep FAILED $OUT/tune3.log | head -3; grep "wall med\|_down_sum" $OUT/tune3.log
echo "== tune 3000"; TAG=3L PROMPT_LEN=3000 timeout 130 python3 .devscripts/s10_tune.py "$(cat .devscripts/s12_variants3L.json)" 2 > $OUT/tune3L.log 2>&1; echo rc=$?
grep FAILED $OUT/tune3L.log | head -3; grep "wall med" $OUT/tune3L.log
