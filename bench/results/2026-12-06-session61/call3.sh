# Session 61 (~7 minutes, any card): the few-row GEMV of Q6_K / Q3_K at half the superblocks a step (no register
# spills on sm_90; packed_q8.SPILLING). Its GPU tests, then the kernels alone (joined_spill_ab.py), then issue 23's
# c8 at this commit (src) against the commit before (prev: git archive --format=tar.gz 9bd1f81 -o .base/prev.tar), two
# alternated rounds.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
rm -rf /tmp/prev; mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
run_tests joined_gemv 150 tests/kernels/test_packed_q8_joined.py tests/kernels/test_packed_q8.py -k "gemv or joined"
timeout -s INT 120 python3 joined_spill_ab.py 2>&1 | tee $OUT/kernels.txt | cut -c1-220
echo "== kernels t=$(( $(date +%s)-S ))"
quantize_q4km
bench_arms 2 8 src prev 2>&1 | tail -12
