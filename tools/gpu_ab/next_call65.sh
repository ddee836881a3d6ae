# Session 55 (~7 minutes, after next_call64.sh): packed_q8_joined (a projection's two segments of different types in
# one 8-bit GEMV launch: Q4_K_M's Q6_K attn_v beside Q4_K attn_q / attn_k in 12 of the 30B-A3B's 24 layers; off by
# default, STRATA_JOINED_GEMV=1) on a GPU for the first time: its tests, then issue 23's c1 and c8 with the switch off /
# on, two alternated rounds, then trace_steps.py with it on (session 55's trace put the separate v GEMV at 3.1 us of
# such a layer at one stream, 11.2 at eight).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 120 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8_joined.py -p no:cacheprovider > /tmp/t.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))" | tee $OUT/tests.txt
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/t.log | tail -10 | cut -c1-300 | tee -a $OUT/tests.txt
quantize_q4km
for R in 1 2; do for F in 0 1; do
  STRATA_JOINED_GEMV=$F timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 > /tmp/b.log 2>&1
  echo "== joined_gemv=$F r$R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/bench.txt
  grep -E "strata_c" /tmp/b.log | cut -c1-120 | tee -a $OUT/bench.txt
done; done
STRATA_JOINED_GEMV=1 timeout -s INT 80 python3 trace_steps.py /tmp/q4km.gguf /tmp/trace 1 8 > $OUT/trace_steps.txt 2>&1
echo "== trace rc=$? t=$(( $(date +%s)-S ))"; head -c 1200 $OUT/trace_steps.txt
