# For the next session's first call (prepared in session 50, ~7 minutes; H200 or H100, say which). (1) The 8-bit MoE
# pairs' tilings at 1 and 64 tokens with programs of 1-2 rows and whole K rows in flight (pairs_sweep.py's new knobs):
# session 50's Nsight run found a one-token gate/up at 0.73 waves of one-warp programs stalled on loads (1.0 TB/s), and
# a 64-token prompt's at 255 registers (12.5 % occupancy): the pairs are most of a one-stream step's MoE (~20 us a
# layer) and of the 17 ms TTFT in issue 23's c1. (2) The GPU tests session 50's 8-row GEMV touches (its call 4 hit
# the time limit while compiling; 87 passed, none failed).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
PAIRS_TOKENS=1,64 PAIRS_BN=1,2,4,8,16 PAIRS_SB=1,2,4,8 PAIRS_WARPS=1,2,4 PAIRS_STAGES=3 timeout -s INT 330 \
  python3 pairs_sweep.py > $OUT/pairs_sweep.txt 2>&1; echo "== sweep rc=$? t=$(( $(date +%s)-S ))"
grep -E "^tokens|best" $OUT/pairs_sweep.txt | cut -c1-220
timeout -s INT 200 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py tests/kernels/test_packed_gemv.py \
  tests/kernels/test_packed_mmq.py -k "gemv or linear" -p no:cacheprovider > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/tests.log | cut -c1-300
