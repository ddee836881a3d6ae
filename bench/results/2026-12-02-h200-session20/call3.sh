# Session 20's third device call: GPU tests of the session's changes (long chunks' host blocks by DMA, the
# block lists' numpy cache in graph inputs), the long-context table after the host-work fix, and the 24 GiB
# forced window with fp8 KV.
source tools/gpu_ab/device_setup.sh
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== tests"; timeout -s INT 200 python3 -m pytest -v -m gpu -p no:cacheprovider tests/engine/test_kv_offload.py \
  tests/runner/test_cuda_graphs.py --tb=short -k "prompt_chunks_read_host or host_kv_blocks or graph_on_off or beside_running" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | grep -v "PASSED" | head -20 | cut -c1-250
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136"
echo "== long bf16"; timeout -s INT 100 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --repeats 2 --decode-contexts 4096,32768,131072 --output $OUT/long_bf16.json > $OUT/long_bf16.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror" $OUT/long_bf16.log | tail -4
echo "== 24GiB window 16K fp8"; timeout -s INT 170 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --repeats 1 --gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --kv-cache-dtype fp8 --decode-contexts 4096,131072 --output $OUT/long_24g_res16k_fp8.json > $OUT/long_24g_res16k_fp8.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror|Interrupt|File" $OUT/long_24g_res16k_fp8.log | tail -8 | cut -c1-250
