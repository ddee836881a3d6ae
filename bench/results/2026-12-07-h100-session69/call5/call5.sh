# Session 69 (any card, ~3.5 minutes): decode attention at two programs a multiprocessor against eight (HEAD~1) at
# 8 streams after 3,900-token prompts (issue 23's 30B-A3B 24L Q4_K_M; call 102's 8K runs failed at their
# --max-model-len). Build the archives as next_call102.sh says.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
quantize_q4km
for T in src prev; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 75 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 8 --input-len 3900 --output-len 128 \
    --concurrency 8 --repeats 2 --warmup-output-len 0 --output $OUT/long_$T.json > $OUT/long_$T.log 2>&1)
  echo "== $T 3.9K c8 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|Error" $OUT/long_$T.log | cut -c1-170
done
