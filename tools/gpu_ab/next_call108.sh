# Prepared in session 70 (~5 minutes): on an H200, issue 23's commands (c1 / c8 / c16 of the 30B-A3B 24L Q4_K_M and
# the offload command at 25 %, whose targets are the H200's); on an H100, next_call110.sh (Qwen4-Exp's PLE table
# read in place from a Q4_K_M file).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
if ! nvidia-smi -L | grep -q H200; then exec bash tools/gpu_ab/next_call110.sh; fi
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
quantize_q4km
timeout -s INT 120 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|prefill" $OUT/q4km.log | cut -c1-170
for R in 1; do
  [ $(( $(date +%s)-S )) -lt 250 ] && timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
    --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% --output $OUT/off25_r$R.json \
    > $OUT/off25_r$R.log 2>&1
  echo "== offload 25% round $R rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25_r$R.log | cut -c1-170
done
