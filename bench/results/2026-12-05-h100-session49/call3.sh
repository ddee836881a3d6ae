# Session 49, call 3: the zero-copy share below 0.2 and at 0.25 (offload_timeline.py, 16 threads), then issue 23's
# offload command at 25 % / 50 % with --zero-copy-frac 0.25 against auto (0.4) in one machine start.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
for run in 25%:0.1 25%:0.25 50%:0.1 50%:0.25; do cache=${run%%:*}; zc=${run##*:}
  timeout -s INT 40 python3 offload_timeline.py /tmp/q4km.gguf cache=$cache zc=$zc arms=16:5000 \
    > $OUT/timeline_${cache%\%}_zc$zc.txt 2>&1
  echo "== cache $cache zc $zc rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline_${cache%\%}_zc$zc.txt | cut -c1-250
done
for cache in 25% 50%; do for zc in 0.25 auto; do
  timeout -s INT 45 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
    --repeats 2 --expert-cache $cache --zero-copy-frac $zc --output $OUT/off${cache%\%}_zc$zc.json > $OUT/off${cache%\%}_zc$zc.log 2>&1
  echo "== offload $cache zc $zc rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off${cache%\%}_zc$zc.log | cut -c1-160
done; done
