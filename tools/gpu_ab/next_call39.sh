# For a later call of the next session (prepared in session 50, ~3 minutes): the GPU tests session 50's 8-row GEMV
# touches (its call 4 hit the time limit while compiling; 87 passed, none failed).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 400 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py tests/kernels/test_packed_gemv.py \
  tests/kernels/test_packed_mmq.py -k "gemv or linear" -p no:cacheprovider > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/tests.log | cut -c1-300
