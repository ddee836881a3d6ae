# session 11, call 3: L2 prefetch of the next weights from latency-bound kernels: tests; in-process sweep at 64- and 3000-token prompts
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
echo "== tests"; timeout 100 python3 -m pytest -q -m gpu tests/kernels/test_prefetch.py tests/kernels/test_kernels.py tests/kernels/test_fused_ops.py -k "prefetch or paged_attention or route or rms_norm" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== tune 64"; TAG=3 timeout 200 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants3.json)" 3 > $OUT/tune3.log 2>&1; echo rc=$?
grep FAILED $OUT/tune3.log | head -3; tail -6 $OUT/tune3.log
echo "== tune 3000"; TAG=3L PROMPT_LEN=3000 timeout 130 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants3L.json)" 2 > $OUT/tune3L.log 2>&1; echo rc=$?
grep FAILED $OUT/tune3L.log | head -3; tail -3 $OUT/tune3L.log
