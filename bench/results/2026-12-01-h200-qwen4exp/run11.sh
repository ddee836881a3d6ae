export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
export PYTHONPATH=$PWD:/tmp/site
echo "== GPU tests: kernels of the hyper-connections, the new families' graphs, GGUF on CUDA"
PYTHONPATH=$PWD:/tmp/site:/tmp/hf timeout 260 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py tests/weights tests/model > $OUT/gpu_tests_final.log 2>&1; echo rc=$?; tail -8 $OUT/gpu_tests_final.log
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 2"
echo "== qwen4exp 4 layers bf16, c1,8,16 + prefill 512, 2 repeats"
timeout 240 python3 -m strata.cli.main bench offline "$M4" $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/qwen4exp4_bf16_final.json > $OUT/qwen4exp4_bf16_final.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_bf16_final.log | tail -5
