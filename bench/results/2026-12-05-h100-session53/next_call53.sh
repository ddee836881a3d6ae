# Session 53 (~9.5 minutes; run first): session 52's next_call52.sh (the pairs' GPU tests at fffb677's defaults, then
# pairs_isum_diag.py), then the engine GPU tests that session 52's call 2 did not reach with the fused attention merge
# on by default: tests/runner/test_cuda_graphs.py and tests/spec.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 130 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "pair" -p no:cacheprovider \
  > $OUT/tests_pairs.log 2>&1; echo "== pairs tests rc=$? t=$(( $(date +%s)-S ))"; tail -4 $OUT/tests_pairs.log | cut -c1-300
timeout -s INT 130 python3 pairs_isum_diag.py > $OUT/diag.txt 2>&1; tail -30 $OUT/diag.txt; echo "== diag t=$(( $(date +%s)-S ))"
timeout -s INT 290 python3 -m pytest -q -m gpu tests/runner/test_cuda_graphs.py tests/spec -p no:cacheprovider -x \
  > $OUT/tests_engine.log 2>&1; echo "== engine tests rc=$? t=$(( $(date +%s)-S ))"; tail -6 $OUT/tests_engine.log | cut -c1-300
