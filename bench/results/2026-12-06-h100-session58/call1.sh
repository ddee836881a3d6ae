# Session 57 (~8 minutes): session 57's 1- and 3-4-row GEMV tilings (one warp at one row; 2 or 4 rows of W with
# 4-8 superblocks at 3-4 rows; chosen from next_call67's H100 sweep, not yet timed end to end) against the commit
# before them (.base/prev.tar: git archive f57bed3). The GEMV / joined GPU tests at HEAD; issue 23's c1 / c8 and its
# Q4_K_M model with synthetic speculation at one stream (4-row verification windows), arms alternated, two rounds;
# then the 1- and 4-row sweep again (on an H200 it tells whether the H100's picks hold there); test_cuda_graphs'
# prompts-beside-windows cases (session 57's call 1 ran 5 before its limit) while time allows.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#   && git archive --format=tar.gz f57bed3 -o .base/prev.tar
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
run_tests gemv_joined 200 -n 8 tests/kernels/test_packed_q8.py tests/kernels/test_packed_q8_joined.py -k "gemv or joined"
quantize_q4km
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
for R in 1 2; do for T in src prev; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 90 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 1,8 --repeats 1 > /tmp/b.log 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/b.log | cut -c1-120 | tee -a $OUT/ab.txt
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 90 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 1 --repeats 1 --speculative-config "$SPEC" > /tmp/b.log 2>&1)
  echo "== $T spec round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_" /tmp/b.log | cut -c1-140 | tee -a $OUT/ab.txt
done; done
[ $(( $(date +%s)-S )) -lt 420 ] && GEMV_GRID=narrow GEMV_ROWS=1,4 timeout -s INT 120 python3 gemv_rows_sweep.py > $OUT/sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; python3 pick_gemv_tiling.py $OUT/gemv_rows_sweep.json | tee $OUT/pick.txt
[ $(( $(date +%s)-S )) -lt 480 ] && run_tests graphs_windows 110 -n 3 tests/runner/test_cuda_graphs.py \
  -k "beside_verification_windows"
