# Session 31 call 4: the MoE pairs' kernel tests at the new one-token tilings; issue 26's 24 GiB command again (a second
# machine start, copies made ahead); issue 29's Q4_K_M command at one stream with the new tilings.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 70 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py --tb=short -k "pairs" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -10 | cut -c1-200
timeout -s INT 150 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136 --repeats 1 \
  --gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072 --kv-cache-dtype fp8 \
  --kv-staging-layers 1 --output $OUT/long_24g_fp8_ahead.json > $OUT/long_24g_fp8_ahead.log 2>&1
echo "== issue 26 rc=$? t=$(( $(date +%s)-S ))"; grep -E "decode_at|rror" $OUT/long_24g_fp8_ahead.log | tail -3 | cut -c1-200
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
LEFT=$(( 350 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== issue 29 Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4e.log | tail -3 | cut -c1-160
