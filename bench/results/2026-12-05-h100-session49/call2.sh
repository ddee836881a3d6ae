# Session 49, call 2: quant_moe as one job (519b87a) is ~25 % faster on the host's 16 threads, but issue 23's offload at
# 25 % did not move (97.8 against 97.3 tok/s): at zero copy auto (0.4) the host part waits for the device's in-place
# reads. The share swept again with the faster CPU part (offload_timeline.py, 16 threads).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
for run in 25%:0.2 25%:0.3 25%:0.4 50%:0.2 50%:0.4; do cache=${run%%:*}; zc=${run##*:}
  timeout -s INT 50 python3 offload_timeline.py /tmp/q4km.gguf cache=$cache zc=$zc arms=16:5000 \
    > $OUT/timeline_${cache%\%}_zc$zc.txt 2>&1
  echo "== cache $cache zc $zc rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline_${cache%\%}_zc$zc.txt | cut -c1-400
done
