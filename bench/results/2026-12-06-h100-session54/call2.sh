# Session 54 (~8.5 minutes; next_call59.sh plus whole i-quant files): the offload fix's A/B (issue 23's offload
# command at 25 %, STRATA_NO_HOST_PAIR_TILINGS=0 / 1, two alternated rounds), the pairs' GPU tests (the pinned-host
# one new), packed_moe's and the IQ4 / MXFP4 GEMV's; then issue 23's 30B-A3B 24L shape written by the new i-quant
# scheme iq3_xxs (experts IQ3_XXS gate/up, Q3_K down, Q4_K in the first eighth)
# against Q4_K_M, one stream and 8 streams, one run each.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
quantize_q4km
cat /tmp/q4km.gguf > /dev/null
for R in 1 2; do for F in 0 1; do
  STRATA_NO_HOST_PAIR_TILINGS=$F timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
    --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% --output $OUT/off${F}_r$R.json \
    > $OUT/off${F}_r$R.log 2>&1
  echo "== no_host_tilings=$F r$R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt
  grep -E "strata_c1" $OUT/off${F}_r$R.log | cut -c1-110 >> $OUT/ab.txt
done; done
cat $OUT/ab.txt
timeout -s INT 180 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py \
  tests/kernels/test_packed_gemv.py -k "pair or moe or iq or (gemv and (-20] or -23])) or 39" -p no:cacheprovider \
  > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed" $OUT/tests.log | tail -12 | cut -c1-300
for SCHEME in iq3_xxs; do
  timeout -s INT 120 python3 -m strata.cli.main quantize "random:qwen3-30b-a3b?num_hidden_layers=24" /tmp/$SCHEME.gguf \
    --scheme $SCHEME --device cuda > $OUT/quant_$SCHEME.log 2>&1; echo "== quant $SCHEME rc=$? t=$(( $(date +%s)-S ))"
  tail -2 $OUT/quant_$SCHEME.log | cut -c1-300
done
for F in q4km iq3_xxs; do
  timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/$F.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 --output $OUT/$F.json \
    > $OUT/$F.log 2>&1
  echo "== bench $F rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/$F.log | cut -c1-120
done
