# Prepared in session 75 (~9 minutes; run under a 600 s limit). On an H200: next_call116.sh's H200 part (issue 23's
# c1 / c8 / c16 / prefill 512, the offload command at 25 % with the AVX-512 and AVX2 CPU kernels, c1 again), then
# a c1 / c8 decode trace of the same file (trace_steps.py). On an H100: the trace first (where a c1 / c8 step's
# critical path goes after session 74's packed_mmq change), then issue 27's GPU tests (two pipeline stages sharing
# the card: prompt graph parts under a split among them).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
trace() {
  timeout -k 5 -s INT $1 python3 trace_steps.py /tmp/q4km.gguf $OUT/trace 1 8 > $OUT/trace.txt 2>&1
  echo "== trace rc=$? t=$(( $(date +%s)-S ))"; head -70 $OUT/trace.txt | cut -c1-160
}
quantize_q4km
if nvidia-smi -L | grep -q H200; then
  L=${LIMIT:-580}
  if [ $L -lt 500 ]; then issue23 120 1,8; else issue23 150; fi  # a short call: c1 / c8 only (c16, prefill met)
  [ $(left $((L - 160))) -gt 80 ] && offload25 off25_avx512 80
  [ $(left $((L - 80))) -gt 70 ] && STRATA_CPU_QUANT_ISA=avx2 offload25 off25_avx2 80
  [ $(left $((L - 10))) -gt 70 ] && offload25 off25_avx512_2 80
  [ $(left $L) -gt 40 ] && trace $(left $L)
  exit 0
fi
trace ${TRACE_S:-120}
[ $(left ${LIMIT:-580}) -gt 60 ] && run_tests pipeline $(left ${LIMIT:-580}) tests/runner/test_pipeline.py
exit 0
