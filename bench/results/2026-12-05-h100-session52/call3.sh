# Session 52, after call 1 (next_call45.sh) made each launch's fastest tiling and ISUM the 8-bit pairs' defaults
# (30B-A3B shapes; Qwen4-Exp's 640-wide down rows keep PAIR_CONFIG): the pairs' GPU tests at the new defaults, the
# offload GPU tests (zero-copy experts run the same pairs), then issue 23's c1 / c8 / c16 once at HEAD.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 150 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "pair" -p no:cacheprovider \
  > $OUT/tests_pairs.log 2>&1; echo "== pairs tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_pairs.log | cut -c1-300
timeout -s INT 150 python3 -m pytest -q -m gpu tests/experts/test_expert_offload_gpu.py -p no:cacheprovider \
  > $OUT/tests_offload.log 2>&1; echo "== offload tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_offload.log | cut -c1-300
quantize_q4km
bench_arms 1 1,8,16 src
