export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
export PYTHONPATH=$PWD:/tmp/site
python3 -c "import torch, transformers; print('torch', torch.__version__, 'image transformers', transformers.__version__)"
PYTHONPATH=$PWD:/tmp/site:/tmp/hf python3 -c "import transformers; print('carried transformers', transformers.__version__)"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
echo "== GPU tests"
PYTHONPATH=$PWD:/tmp/site:/tmp/hf timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py -k "qwen3_5 or qwen4 or float32" > $OUT/gpu_tests_new_families.log 2>&1; echo rc=$?; tail -15 $OUT/gpu_tests_new_families.log
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== qwen4exp 4 layers bf16, c1,8,16 + prefill 512"
timeout 200 python3 -m strata.cli.main bench offline "$M4" $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/qwen4exp4_bf16.json > $OUT/qwen4exp4_bf16.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_bf16.log | tail -8
