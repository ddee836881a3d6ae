# For the next session (prepared in session 49, ~4 minutes): an offloaded 64-token prompt takes 100-140 ms on the H100
# host (~12 % of issue 23's offload command), all of its missed pairs on the CPU: prompt streaming copies only experts
# with >= 32 of a step's pairs (--prompt-stream-min-pairs), which a 64-token prompt (512 pairs over 128 experts, ~4 an
# expert) never reaches. Lower thresholds copy its most used experts over PCIe beside the CPU (5: ~25 %, 4: ~40 % of
# them); TTFT p50 and tok/s of the offload command at 25 % and 50 %, zero copy auto.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
for cache in 25% 50%; do for min_pairs in 32 6 5 4; do
  timeout -s INT 45 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
    --repeats 3 --expert-cache $cache --prompt-stream-min-pairs $min_pairs --output /tmp/off.json > /tmp/off.log 2>&1
  echo "== offload $cache prompt-stream-min-pairs $min_pairs rc=$? t=$(( $(date +%s)-S ))"
  grep -E "strata_c1" /tmp/off.log | cut -c1-160
done; done
