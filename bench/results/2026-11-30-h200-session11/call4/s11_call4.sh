# session 11, call 4: the step's cos/sin rows shared by the layers: tests; in-process sweep (with session 10's leftovers) at 64- and 3000-token prompts
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
echo "== tests"; timeout 60 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py -k "rope or cos_sin" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== tune 64"; TAG=4 timeout 220 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants4.json)" 4 > $OUT/tune4.log 2>&1; echo rc=$?
grep FAILED $OUT/tune4.log | head -3; tail -6 $OUT/tune4.log
echo "== tune 3000"; TAG=4L PROMPT_LEN=3000 timeout 120 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants4L.json)" 2 > $OUT/tune4L.log 2>&1; echo rc=$?
grep FAILED $OUT/tune4L.log | head -3; tail -3 $OUT/tune4L.log
