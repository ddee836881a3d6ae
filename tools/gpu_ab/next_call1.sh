# Prepared in session 40 for the next session's first device call: issue 23's expert offload, settled numbers.
# (1) offload_check.py: do HEAD's 25 % greedy tokens part from the all-resident run's by rounding (close top logprobs
# at token 0) or by a bug? (2) the offload command at 25 % / 50 %, uniform and static split, 3 repeats each, 128 tokens
# (session 40's single runs of one tree spread 54-83 tok/s); (3) quant_moe with the unsigned Q6_K. Build the archive:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 45 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 60 python3 qmoe_scale.py threads=16 pairs=6,8 > $OUT/qmoe.txt 2>&1; echo "== qmoe rc=$?"; cat $OUT/qmoe.txt
timeout -s INT 100 python3 offload_check.py /tmp/q4km.gguf > $OUT/check.txt 2>&1
echo "== check rc=$? t=$(( $(date +%s)-S ))"; grep -E "expert_cache|token 0|missed|equal" $OUT/check.txt | cut -c1-300
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --repeats 3 --concurrency 1
  --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0"
for ARM in 25%:uniform 25%:static 50%:uniform 50%:static; do
  IFS=: read CACHE SPLIT <<< "$ARM"; NAME=off_${CACHE%\%}_$SPLIT
  timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $CACHE \
    --expert-split $SPLIT --output $OUT/$NAME.json > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-110)"
done
