# Session 39, call 6: which commit slowed issue 23's offload (25 % of the experts on the GPU, 16 CPU threads: 173.9
# tok/s at 7376f35 in session 22, 30.0 at efc6e39 in call 5). Same file and short command on each tree.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
OFF="--device cuda --max-model-len 4096 --num-prompts 1 --input-len 64 --output-len 32 --repeats 1 --concurrency 1
  --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0 --expert-cache 25%"
for T in $OLDPWD/.base/bis/*.tgz src; do
  C=$(basename $T .tgz); D=/tmp/bis/$C; mkdir -p $D
  [ "$C" = src ] && D=/tmp/src || tar -xzf $T -C $D
  (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 50 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    $OFF --output $OUT/off_$C.json) > $OUT/off_$C.log 2>&1
  echo "== $C rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/off_$C.log | cut -c1-90)"
done
