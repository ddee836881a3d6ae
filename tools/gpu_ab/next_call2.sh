# Prepared in session 28 (still to run after session 30): issue 26's ratio measured with three repeats per context (sessions 20-27 measured it
# once per context; the median of three is the honest figure). The 24 GiB command of session 27's call 2: fp8 KV,
# a 16K resident window, one staging layer; decode at 4K and 128K context, one stream.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 570 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136 \
  --repeats 3 --gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072 \
  --kv-cache-dtype fp8 --kv-staging-layers 1 --output $OUT/long_24g_fp8_r3.json > $OUT/long_24g_fp8_r3.log 2>&1
echo "== issue 26 rc=$? t=$(( $(date +%s)-S ))"; grep -iE "context|ratio|tok/s" $OUT/long_24g_fp8_r3.log | tail -8 | cut -c1-200
