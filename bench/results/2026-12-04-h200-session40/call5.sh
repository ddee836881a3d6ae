# Session 40, call 5: the packed CPU kernel's rows prefetched 4 ahead (HEAD) against 870beab (call 4's new tree): quant_moe
# alone (qmoe_scale.py, 16 / 15 threads, 6 and 8 pairs), issue 23's offload command at 25 % in each tree twice,
# then 50 % (call 4: 55.5 tok/s, below 25 %'s 65.4) with offload_timeline.py at 50 %.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 45 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
D=/tmp/old; mkdir -p $D && tar -xzf $OLDPWD/.base/bis/870beab.tgz -C $D && cp qmoe_scale.py $D/
for TREE in new old; do R=/tmp/src; [ $TREE = old ] && R=$D
  (cd $R && PYTHONPATH=$R:/tmp/site:/tmp/hf timeout -s INT 90 python3 qmoe_scale.py threads=16,15 pairs=6,8) \
    > $OUT/qmoe_$TREE.txt 2>&1; echo "== qmoe $TREE rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/qmoe_$TREE.txt
done
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 64 --repeats 2 --concurrency 1
  --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0"
for ARM in old:25%:1 new:25%:1 old:25%:2 new:25%:2 new:50%:1; do
  IFS=: read TREE CACHE RUN <<< "$ARM"; NAME=${TREE}_${CACHE%\%}_$RUN; R=/tmp/src; [ $TREE = old ] && R=$D
  (cd $R && PYTHONPATH=$R:/tmp/site:/tmp/hf timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    $OFF --expert-cache $CACHE --output $OUT/$NAME.json) > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-110)"
done
timeout -s INT 90 python3 offload_timeline.py /tmp/q4km.gguf cache=50% arms=16:5000 > $OUT/timeline50.txt 2>&1
echo "== timeline 50% rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline50.txt | cut -c1-330
