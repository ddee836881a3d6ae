# Prepared in session 74 (~5 minutes): packed_mmq's gate/up programs rounding their own output (HEAD) against the
# commit before (a float32 act tensor and a quantize launch a layer; session 74's H100 profile of a 64-token prompt of
# issue 23's 30B-A3B Q4_K_M: _quantize_kernel 1.77 of 12.23 ms of kernels, timed under PDL so overlapping).
# The GPU tests of the grouped kernels, then 1-token generates at 64 / 512-token prompts from each tree, alternated.
# Build the archives first: git archive --format=tar.gz HEAD -o .base/src.tar; git archive --format=tar.gz <the commit before packed_mmq's fused rounding, 4c3c373> -o
# .base/prev.tar; git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
mkdir -p /tmp/prev && tar -xf .base/prev.tar -C /tmp/prev && cp tools/gpu_ab/*.py /tmp/prev/
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
quantize_q4km
run_tests mmq 100 tests/kernels/test_packed_mmq.py tests/kernels/test_packed_moe.py
for R in 1 2; do for T in prev src; do
  [ $(left 360) -gt 40 ] || break
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf PROMPT_LENS=64,512 PROF_LEN=64 timeout -s INT 60 \
    python3 prompt_step_prof.py /tmp/q4km.gguf > $OUT/prof_${T}_$R.log 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))"; grep -E "ms a|quantize|gate_up" $OUT/prof_${T}_$R.log | cut -c1-90
done; done
exit 0
