export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
export PYTHONPATH=$PWD:/tmp/site
echo "== GPU tests"
PYTHONPATH=$PWD:/tmp/site:/tmp/hf timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py -k hyper tests/runner/test_cuda_graphs.py -k "hyper or qwen4" > $OUT/gpu_tests_hyper2.log 2>&1; echo rc=$?; tail -6 $OUT/gpu_tests_hyper2.log
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== qwen4exp 4 layers bf16, c1,8,16 + prefill 512"
timeout 200 python3 -m strata.cli.main bench offline "$M4" $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/qwen4exp4_bf16_hyper2.json > $OUT/qwen4exp4_bf16_hyper2.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_bf16_hyper2.log | tail -5
echo "== kernel profile (eager decode)"
timeout 150 python3 .base/prof_q4.py > $OUT/prof_q4_2.txt 2>&1; echo rc=$?; head -40 $OUT/prof_q4_2.txt | cut -c1-160
