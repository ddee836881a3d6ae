# Session 20's first device call: `bash tools/gpu_ab/next_call1.sh` with carry [".whl", ".base"] after building
# the archive (device_setup.sh says how); each part has its own limit, `timeout -s INT` prints where a hang was.
source tools/gpu_ab/device_setup.sh
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
# GPU tests written or touched in session 19 and not yet run there (-v: names survive a timeout)
echo "== tests"; timeout -s INT 170 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py \
  tests/experts/test_expert_offload_gpu.py tests/kernels/test_fused_ops.py --tb=short \
  -k "host_kv_blocks or beside_verification or stream or offload or skinny_mlp" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | grep -v "PASSED" | head -20 | cut -c1-250
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136"
# issue 26: the median-gap table, then a 24 GiB card with KV beyond VRAM forced (bf16, then fp8 KV)
echo "== long bf16"; timeout -s INT 100 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --repeats 2 --decode-contexts 4096,32768,131072 --output $OUT/long_bf16.json > $OUT/long_bf16.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror" $OUT/long_bf16.log | tail -4
for KV in auto fp8; do
echo "== 24GiB window 16K $KV"; timeout -s INT 150 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --repeats 1 --gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --kv-cache-dtype $KV --decode-contexts 4096,131072 --output $OUT/long_24g_res16k_$KV.json > $OUT/long_24g_res16k_$KV.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror|Interrupt|File" $OUT/long_24g_res16k_$KV.log | tail -8 | cut -c1-250
done
