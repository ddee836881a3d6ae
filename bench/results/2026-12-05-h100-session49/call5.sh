# Session 49, call 5: issue 23's offload command around zero copy 0.2 (call 4: 0.2 beat auto's 0.4 at 25 % and 50 %):
# 0.15 / 0.3 at 25 %, 0.1 at 50 %, three repeats each.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for run in 25%:0.15 25%:0.3 50%:0.1; do cache=${run%%:*}; zc=${run##*:}
  timeout -s INT 45 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
    --repeats 3 --expert-cache $cache --zero-copy-frac $zc --output /tmp/off.json > /tmp/off.log 2>&1
  echo "== offload $cache zc $zc rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" /tmp/off.log | cut -c1-160
done
