# Session 49, call 4: every offload GPU test (the exchange by kernels is the default since session 48; quant_moe is one
# job since 519b87a), the prompt-logprobs GPU test, then issue 23's offload command at 25 % / 50 % with zero copy 0.2
# against auto (0.4), three repeats each (median tpot).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 170 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py \
  > $OUT/tests_offload_gpu.log 2>&1
echo "== offload GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_offload_gpu.log | tail -8
timeout -s INT 60 python3 -m pytest -q -p no:cacheprovider tests/engine/test_prompt_logprobs.py -m gpu \
  > $OUT/tests_prompt_logprobs.log 2>&1
echo "== prompt logprobs GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_prompt_logprobs.log | tail -4
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
for cache in 25% 50%; do for zc in 0.2 auto; do
  timeout -s INT 50 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
    --repeats 3 --expert-cache $cache --zero-copy-frac $zc --output /tmp/off.json > /tmp/off.log 2>&1
  echo "== offload $cache zc $zc rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" /tmp/off.log | cut -c1-160
  python3 -c "import json; r = json.load(open('/tmp/off.json'))['results']['strata_c1']
print('   tpot p50 by run:', [round(x['tpot_p50_ms'], 2) for x in r['runs']] if 'tpot_p50_ms' in r['runs'][0] else r['runs'][0].keys())"
done; done
