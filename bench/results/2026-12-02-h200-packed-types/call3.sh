export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
echo "== GPU packed kernel tests"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_gemv.py tests/kernels/test_packed_moe.py > $OUT/gpu_packed.log 2>&1; echo rc=$?; tail -4 $OUT/gpu_packed.log
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
echo "== quantize q4_k_m"; timeout 100 python3 -m strata.cli.main quantize "$M4" /tmp/q4e.gguf --scheme q4_k_m --device cuda 2>&1 | grep types
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== qwen4exp 4 layers q4_k_m, c1,8,16 + prefill 512"
timeout 150 python3 -m strata.cli.main bench offline /tmp/q4e.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/qwen4exp4_q4km_types.json > $OUT/qwen4exp4_q4km_types.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_q4km_types.log | grep -v "^ *{" | tail -5
echo "== profile eager c1"
timeout 120 python3 .base/prof_q4k.py /tmp/q4e.gguf > $OUT/prof_q4k_ops.txt 2>&1; echo rc=$?
