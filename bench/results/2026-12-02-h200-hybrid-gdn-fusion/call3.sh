export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cd /tmp/src
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
echo "== bench"; timeout 200 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1; echo rc=$?; grep -E "strata_c|prefill_|copy" $OUT/next80_8l.log | tail -6
echo "== q4e bf16"; timeout 150 python3 -m strata.cli.main bench offline "random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4e_bf16.json > $OUT/q4e_bf16.log 2>&1; echo rc=$?; grep -E "strata_c|prefill_|copy" $OUT/q4e_bf16.log | tail -6
echo "== profile eager"; timeout 100 python3 $ROOT/.base/prof_hybrid.py "$M" eager > $OUT/prof_eager.log 2>&1; echo rc=$?; grep -E "=====|kernel total" $OUT/prof_eager.log
echo "== tests"; timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py tests/runner tests/spec tests/experts -k "not packed" > $OUT/gpu_tests.log 2>&1; echo rc=$?; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | head -20 | cut -c1-250
