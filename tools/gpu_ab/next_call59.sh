# Session 54 (~6 minutes): the fix of session 53's offload slowdown. next_call56.sh placed it at ad90c54 (session 52's
# one-token pairs tilings with integer group sums): f0ec8db 103.0 / 92.7, ad90c54 89.1 / 81.9, HEAD 86.2 / 80.6,
# HEAD with session 50's one-token tilings 101.6 / 91.6 tok/s. Now the pairs read in place from pinned host memory
# (the zero-copy experts) take session 50's tilings; STRATA_NO_HOST_PAIR_TILINGS=1 gives them the device's. Issue 23's
# offload command at 25 % with and without, two alternated rounds; then the pairs' GPU tests (the new pinned-host one
# included), packed_moe's and the IQ4 / MXFP4 GEMV's (next_call57.sh's test step).
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
timeout -s INT 240 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py \
  tests/kernels/test_packed_gemv.py -k "pair or moe or iq or (gemv and (-20] or -23])) or 39" -p no:cacheprovider \
  > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed" $OUT/tests.log | tail -12 | cut -c1-300
