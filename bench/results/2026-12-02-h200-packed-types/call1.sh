export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
echo "== GPU kernel tests (partial Q8_0 chunks forced on in the 'partial' tests)"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels -x > $OUT/gpu_kernels.log 2>&1; echo rc=$?; tail -15 $OUT/gpu_kernels.log
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
echo "== quantize q4_k_m"; timeout 120 python3 -m strata.cli.main quantize "$M4" /tmp/q4e.gguf --scheme q4_k_m --device cuda 2>&1 | tail -2
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== qwen4exp 4 layers q4_k_m, flag on, c1,8,16 + prefill 512"
timeout 200 python3 .base/q8on.py bench offline /tmp/q4e.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/qwen4exp4_q4km_q8p.json > $OUT/qwen4exp4_q4km_q8p.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_q4km_q8p.log | grep -v "^ " | tail -8
nvidia-smi --query-gpu=memory.used --format=csv
