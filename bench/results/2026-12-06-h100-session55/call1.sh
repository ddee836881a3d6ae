# Session 55 (one call of at most ~9.5 minutes, for a session whose device starts keep failing; the parts of
# next_call61.sh and next_call62.sh that matter most, each skipped once the call's time runs short): the GPU tests
# not yet run (q8_grouped_pairs, the graph test of prompts beside verification windows, the IQ4 / MXFP4 GEMV,
# packed_moe), grouped_pairs_ab.py on Q4_K / Q6_K and IQ3_XXS / Q3_K at 32 / 64 tokens, trace_steps.py at 1 and 8
# streams, issue 23's c1 with STRATA_GROUPED_PAIRS off / on, then its offload at 25 % with the host tilings on / off.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - S) )); }   # seconds left of the call's budget
nvidia-smi -L
quantize_q4km
run_tests() {  # run_tests NAME SECONDS PYTEST_ARGS...
  local name=$1 secs=$2; shift 2
  timeout -s INT $secs python3 -m pytest -q -m gpu "$@" -p no:cacheprovider > /tmp/t.log 2>&1
  echo "== $name rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/tests.txt
  grep -E "^(FAILED|ERROR)|passed|failed" /tmp/t.log | tail -10 | cut -c1-300 | tee -a $OUT/tests.txt
}
run_tests grouped 110 tests/kernels/test_q8_grouped_pairs.py tests/runner/test_cuda_graphs.py -k "grouped or verification_windows"
run_tests iq4_gemv 60 tests/kernels/test_packed_q8.py tests/kernels/test_packed_gemv.py \
  -k "(gemv or dequant) and (-20- or -23- or -39- or -20] or -23] or -39])"
run_tests packed_moe 60 tests/kernels/test_packed_moe.py
[ $(left) -gt 300 ] && GROUPED_ARMS=4,8 GROUPED_TOKENS=32,64 IQ_PAIRS=12:14,18:11 timeout -s INT 120 \
  python3 grouped_pairs_ab.py > $OUT/grouped_ab.txt 2>&1
echo "== grouped_pairs_ab rc=$? t=$(( $(date +%s)-S ))"; grep -E "^best|Error" $OUT/grouped_ab.txt | cut -c1-140
[ $(left) -gt 200 ] && timeout -s INT 80 python3 trace_steps.py /tmp/q4km.gguf /tmp/trace 1 8 > $OUT/trace_steps.txt 2>&1
echo "== trace rc=$? t=$(( $(date +%s)-S ))"
for F in 0 1; do
  [ $(left) -gt 100 ] || break
  STRATA_GROUPED_PAIRS=$F timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 > /tmp/b.log 2>&1
  echo "== grouped_pairs=$F rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/bench.txt
  grep -E "strata_c1" /tmp/b.log | cut -c1-120 | tee -a $OUT/bench.txt
done
for F in 0 1; do
  [ $(left) -gt 60 ] || break
  STRATA_NO_HOST_PAIR_TILINGS=$F timeout -s INT $(( $(left) < 70 ? $(left) : 70 )) python3 -m strata.cli.main bench \
    offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 \
    --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 --repeats 2 --expert-cache 25% > /tmp/off.log 2>&1
  echo "== offload 25% no_host_tilings=$F rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/bench.txt
  grep -E "strata_c1" /tmp/off.log | cut -c1-110 | tee -a $OUT/bench.txt
done
head -c 2500 $OUT/trace_steps.txt
