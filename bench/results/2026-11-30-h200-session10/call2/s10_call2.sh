# session 10, call 2: the rest of call 1's tests + fold_step; in-process single-stream variants (fixed pool reuse)
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
echo "== tests"; timeout 200 python3 -m pytest -q -m gpu tests/runner/test_cuda_graphs.py tests/kernels/test_fused_ops.py -k "graph or pdl or fused or hf or fresh or fold or capacity" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -8
echo "== tune"; TAG=2 timeout 300 python3 .devscripts/s10_tune.py "$(cat .devscripts/s10_variants2.json)" 3 > $OUT/tune2.log 2>&1; echo rc=$?
tail -20 $OUT/tune2.log
