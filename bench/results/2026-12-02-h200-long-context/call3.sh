export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cd /tmp/src && cp tools/gpu_ab/*.py .
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== tests A"; timeout -s INT 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py -x --tb=short -k "host_kv_blocks and llama and auto" > $OUT/t_a.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "^E |passed|failed|Error" $OUT/t_a.log | head -12 | cut -c1-300
echo "== tests B"; timeout -s INT 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/experts/test_expert_offload_gpu.py tests/kernels/test_kernels.py -k "paged_attention or offload or stream or provider" --tb=short > $OUT/t_b.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "^(FAILED|ERROR)|passed|failed" $OUT/t_b.log | head -12 | cut -c1-250
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --repeats 1 --warmup-output-len 0 --max-model-len 131136"
for KV in auto int8 fp8; do echo "== long $KV"; timeout -s INT 75 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --kv-cache-dtype $KV --decode-contexts 4096,32768,131072 --output $OUT/long_$KV.json > $OUT/long_$KV.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror" $OUT/long_$KV.log | tail -4 | cut -c1-250; done
echo "== 24GB"; timeout -s INT 170 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --gpu-memory-limit-mib 24576 --decode-contexts 4096,131072 --output $OUT/long_24g.json > $OUT/long_24g.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -vE "^\s*$" $OUT/long_24g.log | tail -30 | cut -c1-250
