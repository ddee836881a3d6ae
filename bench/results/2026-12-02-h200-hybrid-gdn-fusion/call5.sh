export PYTHONUNBUFFERED=1
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cp .base/linear_ab.py /tmp/src/ && cd /tmp/src
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
echo "== tests"; timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py tests/kernels/test_kernels.py tests/runner/test_cuda_graphs.py -k "topk_sum or fresh_prompts_beside_running or evicts or int8 or fp8" > $OUT/gpu_tests.log 2>&1; echo rc=$?; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | head -20 | cut -c1-250
echo "== linear A/B"; timeout 45 python3 linear_ab.py 2>&1 | tail -12
