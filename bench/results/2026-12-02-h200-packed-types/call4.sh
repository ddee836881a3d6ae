export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
echo "== GPU tests: packed gemv (both loops), GGUF blocks, constraints/sampler, verify, async, graphs"
timeout 210 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_gemv.py tests/kernels/test_gguf_blocks.py tests/sample tests/spec/test_verify.py tests/engine/test_async_scheduling.py tests/runner/test_cuda_graphs.py > $OUT/gpu_tests.log 2>&1; echo rc=$?; tail -8 $OUT/gpu_tests.log | cut -c1-300
echo "== gemv A/B"
timeout 110 python3 .base/gemv_ab.py > $OUT/gemv_ab.log 2>&1; echo rc=$?; tail -10 $OUT/gemv_ab.log | cut -c1-300
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
echo "== quantize q4_k_m (llama.cpp fallbacks)"; timeout 60 python3 -m strata.cli.main quantize "$M4" /tmp/q4e.gguf --scheme q4_k_m --device cuda 2>&1 | grep types
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
timeout 100 python3 -m strata.cli.main bench offline /tmp/q4e.gguf $ARGS --concurrency 1,8 --output $OUT/qwen4exp4_q4km_q50.json > $OUT/qwen4exp4_q4km_q50.log 2>&1; echo rc=$?; grep "strata_c\|memory plan\|GiB" $OUT/qwen4exp4_q4km_q50.log | tail -12
