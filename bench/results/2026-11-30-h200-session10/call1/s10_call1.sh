# session 10, call 1: fresh K/V folded into the attention launch: tests, in-process single-stream variants, PDL-on profile
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
echo "== tests"; timeout 230 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -k "attention or rope or fresh or graph or pdl or fused or hf" -p no:cacheprovider -x > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -8
echo "== tune"; TAG=1 timeout 260 python3 .devscripts/s10_tune.py "$(cat .devscripts/s10_variants1.json)" 3 > $OUT/tune1.log 2>&1; echo rc=$?
tail -18 $OUT/tune1.log
echo "== profile (PDL on)"; timeout 70 python3 .devscripts/profile_graph.py > $OUT/profile_pdl.log 2>&1; echo rc=$?
head -30 $OUT/profile_pdl.log
