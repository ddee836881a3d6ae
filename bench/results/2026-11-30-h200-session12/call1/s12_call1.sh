# session 12, call 1: early PDL trigger and preloaded one-row projections: tests; sweep at 64- and 3000-token prompts
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
echo "== tests"; timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -k "skinny or preload or graph" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== tune 64"; TAG=1 timeout 260 python3 .devscripts/s10_tune.py "$(cat .devscripts/s12_variants1.json)" 4 > $OUT/tune1.log 2>&1; echo rc=$?
grep FAILED $OUT/tune1.log | head -3; grep -v "^round" $OUT/tune1.log | tail -14
echo "== tune 3000"; TAG=1L PROMPT_LEN=3000 timeout 150 python3 .devscripts/s10_tune.py "$(cat .devscripts/s12_variants1L.json)" 2 > $OUT/tune1L.log 2>&1; echo rc=$?
grep FAILED $OUT/tune1L.log | head -3; grep -v "^round" $OUT/tune1L.log | grep "wall med"
