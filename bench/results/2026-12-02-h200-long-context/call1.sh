export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cd /tmp/src && cp tools/gpu_ab/*.py .
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== new GPU tests"; timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests --ignore=tests/server -k "int8 or host_kv or host_blocks or skinny or beside_verification or fp8" > $OUT/gpu_tests.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | head -20 | cut -c1-250
echo "== bench"; timeout 150 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "strata_c|prefill_|copy" $OUT/next80_8l.log | tail -6
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --repeats 1 --warmup-output-len 0"
echo "== long bf16"; timeout 130 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --max-model-len 131136 --decode-contexts 4096,32768,131072 --output $OUT/long_bf16.json > $OUT/long_bf16.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|Error|error" $OUT/long_bf16.log | tail -5
echo "== long 24GB resident 16K"; timeout 140 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --max-model-len 131136 --gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072 --output $OUT/long_24g_res16k.json > $OUT/long_24g_res16k.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|Error|error|plan|expert" $OUT/long_24g_res16k.log | tail -25 | cut -c1-200
