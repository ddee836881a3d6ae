# Session 56 (~9 minutes; after next_call64.sh, or instead of next_call65.sh, whose A/B it contains): issue 23's c8
# spends ~40 us of a ~137 us layer in three 8-row GEMVs (session 55's trace, H100), far above their bytes' time
# (k_proj 0.6 MB in 5.8 us): 4 rows of W a program and 4 K steps each leave them waiting on loads. Session 50's
# sweep never tried fewer rows of W with more superblocks a step. This call: packed_q8_joined's GPU tests; the 8-row
# GEMV sweep over that narrow grid (each tiling's output checked against the default's); pick_gemv_tiling.py writes
# the best narrow / wide tilings into a copy of the tree (/tmp/tile); then issue 23's c1 and c8 from src, src with
# STRATA_JOINED_GEMV=1 (packed_q8_joined, session 55), tile and tile with the joined GEMV, alternated, a second round
# while time allows; then the GEMV tests in the tile tree.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 90 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8_joined.py -p no:cacheprovider > /tmp/t.log 2>&1
echo "== joined tests rc=$? t=$(( $(date +%s)-S ))" | tee $OUT/tests.txt
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/t.log | tail -10 | cut -c1-300 | tee -a $OUT/tests.txt
quantize_q4km
GEMV_GRID=narrow GEMV_ROWS=8 timeout -s INT 200 python3 gemv_rows_sweep.py > $OUT/gemv_rows_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; cut -c1-300 $OUT/gemv_rows_sweep.txt
mkdir -p /tmp/tile && tar -xf $OLDPWD/.base/src.tar -C /tmp/tile
python3 pick_gemv_tiling.py $OUT/gemv_rows_sweep.json /tmp/tile > $OUT/pick.txt 2>&1; PICKED=$?; cat $OUT/pick.txt
ab() {  # ab ROUND: each arm once, c1 and c8
  for ARM in src joined tile tile_joined; do
    [ "$PICKED" != 0 ] && [[ $ARM == tile* ]] && continue
    T=${ARM%_joined}; J=0; [[ $ARM == *joined ]] && J=1
    (cd /tmp/$T && STRATA_JOINED_GEMV=$J PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 90 python3 -m \
      strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
      --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 --output $OUT/${ARM}_r$1.json > /tmp/b.log 2>&1)
    echo "== $ARM round $1 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt
    grep -E "strata_c" /tmp/b.log | cut -c1-120 | tee -a $OUT/ab.txt
  done
}
ab 1
[ $(( $(date +%s)-S )) -lt 330 ] && ab 2
if [ "$PICKED" = 0 ]; then
  (cd /tmp/tile && PYTHONPATH=/tmp/tile:/tmp/site:/tmp/hf timeout -s INT 90 python3 -m pytest -q -m gpu \
    tests/kernels/test_packed_q8.py -k "gemv" -p no:cacheprovider > /tmp/t.log 2>&1)
  echo "== tile gemv tests rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/tests.txt
  grep -E "^(FAILED|ERROR)|passed|failed" /tmp/t.log | tail -8 | cut -c1-300 | tee -a $OUT/tests.txt
fi
