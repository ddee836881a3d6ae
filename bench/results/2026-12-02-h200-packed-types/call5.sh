export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
export PYTHONPATH=$PWD:/tmp/site:/tmp/hf
echo "== GPU tests"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_gemv.py tests/kernels/test_packed_moe.py tests/kernels/test_gguf_blocks.py tests/sample tests/spec/test_verify.py tests/engine/test_async_scheduling.py tests/runner/test_cuda_graphs.py > $OUT/gpu_tests.log 2>&1; echo rc=$?; tail -12 $OUT/gpu_tests.log | cut -c1-300
