# Session 49, last seconds of device time: issue 23's offload command at 25 % with zero copy auto (0.2 since c1c380c) on
# whatever machine comes (the target, 150 tok/s, is the H200 host's).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 30 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 45 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
  --repeats 2 --expert-cache 25% --output $OUT/off25.json > $OUT/off25.log 2>&1
echo "== offload 25% rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25.log | cut -c1-160; nvidia-smi -L
