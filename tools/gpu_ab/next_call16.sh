# Prepared in session 46: after next_call15, if SM staging wins, the share of missed experts the GPU takes with it.
# Issue 23's offload command (25 %, static split, 16 threads) with STRATA_SM_STAGE=1 at zero copy measure (timed with
# the staging, calibrate.measure_in_place_share), 0.5 and 0.6, then the default (no staging, auto) as the baseline.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --repeats 2 --expert-cache 25%"
for ARM in "1 measure" "1 0.5" "1 0.6" "0 auto"; do
  set -- $ARM
  NAME=off25_sm$1_zc$2
  STRATA_SM_STAGE=$([ $1 = 1 ] && echo 1) timeout -s INT 120 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    $OFF --zero-copy-frac $2 --output $OUT/$NAME.json > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1|in place' $OUT/$NAME.log | cut -c1-160 | tr '\n' ' ')"
done
