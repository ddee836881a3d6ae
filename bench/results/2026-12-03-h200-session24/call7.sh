# Device call 7: Qwen4-Exp Q4_K_M at HEAD against db11cae (.base/prev.tar), alternated. carry [".whl", ".base"].
source tools/gpu_ab/device_setup.sh
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
S=$(date +%s)
[ -f /tmp/q4e.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
for arm in new prev new; do
  if [ $arm = prev ]; then D=/tmp/prev; else D=/tmp/src; fi
  (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1 --concurrency 1 > $OUT/q4e_$arm.$(date +%s).log 2>&1)
  echo "== $arm t=$(( $(date +%s)-S ))"; grep -hE "strata_c1" $(ls -t $OUT/q4e_$arm.*.log | head -1) | cut -c1-100
  [ $(( $(date +%s)-S )) -gt 120 ] && break
done
