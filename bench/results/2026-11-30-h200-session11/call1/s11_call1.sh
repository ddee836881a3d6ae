# session 11, call 1: norm folded into the routing launch: GPU tests; in-process sweep at 64- and 3000-token prompts
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
git log --oneline -1
echo "== tests"; timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py -k "norm_route or folds_the_norm or route_and_align or moe_block or rms_norm" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== model tests"; timeout 150 python3 -m pytest -q -m gpu tests/model tests/runner -p no:cacheprovider > $OUT/tests_model.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests_model.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== tune 64"; TAG=1 timeout 200 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants1.json)" 3 > $OUT/tune1.log 2>&1; echo rc=$?
tail -6 $OUT/tune1.log
echo "== tune 3000"; TAG=1L PROMPT_LEN=3000 timeout 150 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants1L.json)" 3 > $OUT/tune1L.log 2>&1; echo rc=$?
tail -4 $OUT/tune1L.log
