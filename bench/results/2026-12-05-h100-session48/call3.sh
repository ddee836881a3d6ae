# Session 48: the zero-copy share with the native host part (session 47), 25 % and 50 % static: where an offloaded
# token's time goes (offload_timeline.py, 16 threads) at zero copy 0.3 / 0.4 (auto) / 0.5 / 0.6 of each layer's
# experts without a slot. The host part got faster, so the balance point (session 42: ~0.4) may have moved down.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
export STRATA_SM_EXCHANGE=1  # the exchange by kernels (+7 % in call 2 of session 48)
S=$(date +%s)
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
for cache in 25% 50%; do for zc in 0.3 0.4 0.5 0.6; do
  timeout -s INT 50 python3 offload_timeline.py /tmp/q4km.gguf cache=$cache zc=$zc arms=16:5000 \
    > $OUT/timeline_${cache%\%}_zc$zc.txt 2>&1
  echo "== cache $cache zc $zc rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline_${cache%\%}_zc$zc.txt | cut -c1-400
done; done
