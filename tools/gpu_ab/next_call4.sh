# Prepared in session 41: issue 23's offload at 50 % (pcie 0 / 0.5, zero copy 0.25) and the exchange's copies as kernels
# (STRATA_SM_EXCHANGE=1: "between host parts", the next piece's launch, was 57 us a layer in session 41's call 1).
# Build the archive first: git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for SM in 0 1; do
  STRATA_SM_EXCHANGE=$SM timeout -s INT 70 python3 offload_timeline.py /tmp/q4km.gguf arms=16:5000 \
    > $OUT/timeline_sm$SM.txt 2>&1
  echo "== timeline sm $SM rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads" $OUT/timeline_sm$SM.txt | cut -c1-400
done
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --expert-split uniform --repeats 2 --expert-cache 50%"
for ARM in "--pcie-frac 0" "--pcie-frac 0.5" "--zero-copy-frac 0.25"; do
  NAME=off50_$(echo $ARM | tr -d ' -')
  timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF $ARM --output $OUT/$NAME.json \
    > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-160)"
done
