# Session 31 call 3: GPU tests of the KV staging copies made ahead and of the MoE pairs' one-token tilings; issue 26's
# 24 GiB command with the copies made ahead (one repeat; session 27's 0.68 was without); issue 23's 30B-A3B Q4_K_M
# command and issue 29's Q4_K_M one with the new one-token pair tilings.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 -m pytest -v -m gpu -p no:cacheprovider tests/experts/test_expert_offload_gpu.py tests/runner/test_cuda_graphs.py \
  tests/kernels/test_packed_q8.py --tb=short -k "staging or exchange or staged or pairs or moe" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -20 | cut -c1-200
timeout -s INT 200 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136 --repeats 1 \
  --gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072 --kv-cache-dtype fp8 \
  --kv-staging-layers 1 --output $OUT/long_24g_fp8_ahead.json > $OUT/long_24g_fp8_ahead.log 2>&1
echo "== issue 26 rc=$? t=$(( $(date +%s)-S ))"; grep -E "decode_at|rror" $OUT/long_24g_fp8_ahead.log | tail -3 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
LEFT=$(( 540 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 30B Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -4 | cut -c1-200
