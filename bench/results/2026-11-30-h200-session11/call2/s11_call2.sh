# session 11, call 2: norms folded into the routing and down launches: GPU tests; in-process sweep at 64- and 3000-token prompts
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
git log --oneline -1
echo "== tests"; timeout 110 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py -k "norm_route or folds_the_norm or route_and_align or moe_block or rms_norm or moe_down or fused_moe" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== model tests"; timeout 170 python3 -m pytest -q -m gpu tests/model tests/runner tests/spec -p no:cacheprovider > $OUT/tests_model.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests_model.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== tune 64"; TAG=2 timeout 180 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants2.json)" 3 > $OUT/tune2.log 2>&1; echo rc=$?
tail -7 $OUT/tune2.log
echo "== tune 3000"; TAG=2L PROMPT_LEN=3000 timeout 120 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants2L.json)" 2 > $OUT/tune2L.log 2>&1; echo rc=$?
tail -4 $OUT/tune2L.log
