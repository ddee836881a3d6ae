export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
echo "== new test"; timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py -k "verification_windows or fresh_prompts_beside_running" > $OUT/gpu_test_new.log 2>&1; echo rc=$?; grep -E "^E  |passed|failed" $OUT/gpu_test_new.log | head -12 | cut -c1-300
