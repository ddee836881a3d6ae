# Session 54 (~7 minutes, after next_call61.sh): q8_grouped_pairs (the 8-bit pairs grouped by expert in blocks of ROWS,
# each expert's rows unpacked once a block; off by default, STRATA_GROUPED_PAIRS=1) on a GPU for the first time: its
# GPU tests (and the graph test of prompts beside verification windows, whose MTP case now accepts a near tie), then
# grouped_pairs_ab.py (packed_moe at 32-96 tokens of the 30B-A3B's experts, default paths against
# ROWS 4 / 8, Q4_K / Q6_K, IQ3_XXS / Q3_K, IQ2_XXS / IQ3_XXS), then issue 23's c1 (its 64-token prompts route ~4
# pairs an expert: the 8-bit pairs by default) with the switch off and on, two alternated rounds; before them
# trace_steps.py at 1 and 8 streams (each kernel's critical-path time and one layer's launches in order).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 200 python3 -m pytest -q -m gpu tests/kernels/test_q8_grouped_pairs.py tests/runner/test_cuda_graphs.py \
  -k "grouped or verification_windows" -p no:cacheprovider > /tmp/t.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))" | tee $OUT/tests.txt
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/t.log | tail -12 | cut -c1-300 | tee -a $OUT/tests.txt
GROUPED_ARMS=4,8,8:8:2:4:1 GROUPED_TOKENS=32,64,96 timeout -s INT 240 python3 grouped_pairs_ab.py > $OUT/grouped_ab.txt 2>&1
echo "== grouped_pairs_ab rc=$? t=$(( $(date +%s)-S ))"; grep -E "^best|Error" $OUT/grouped_ab.txt | cut -c1-140
quantize_q4km
timeout -s INT 100 python3 trace_steps.py /tmp/q4km.gguf /tmp/trace 1 8 > $OUT/trace_steps.txt 2>&1
echo "== trace rc=$? t=$(( $(date +%s)-S ))"; head -c 1500 $OUT/trace_steps.txt
for R in 1 2; do for F in 0 1; do
  STRATA_GROUPED_PAIRS=$F timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 > /tmp/b.log 2>&1
  echo "== grouped_pairs=$F r$R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/bench.txt
  grep -E "strata_c1" /tmp/b.log | cut -c1-120 | tee -a $OUT/bench.txt
done; done
