# Prepared in session 51 (~8 minutes; after session 52's next_call45.sh). How packed_q8's GEMV sums its K
# steps (config ISUM; today 0 at one row, 1 from two): compiled for sm_90 on the development VM as a launch
# specializes it, a 4,096 x 2,048 Q4_K weight at one row takes 392 / 384 / 264 SASS instructions at ISUM 0 / 1 / 2,
# at 4 rows 672 / 616 / 408, at 8 rows 848 / 728 / 728 (ISUM 2 with 32-bit loads only: lanes along rows of W).
# (1) The GPU tests of ISUM 2. (2) The 30B-A3B's projections (gemv_rows_sweep.py, defaults only) at 1 / 4 / 8 rows,
# ISUM 0, 1, 2. (3) Issue 23's c1 / c8 / c16 with ISUM=2 in every GEMV tiling (`gemv`: default_config patched)
# against HEAD, two alternated rounds, only where (2) finds ISUM 2 faster than the default on a projection.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 150 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "groups_words" \
  -p no:cacheprovider > $OUT/tests.log 2>&1; echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests.log | cut -c1-300
GEMV_ROWS=1,4,8 GEMV_ISUM=0,1,2 GEMV_GRID=0 timeout -s INT 120 python3 gemv_rows_sweep.py > $OUT/gemv.txt 2>&1
echo "== gemv rc=$? t=$(( $(date +%s)-S ))"; cut -c1-200 $OUT/gemv.txt | grep rows
python3 - $OUT/gemv_rows_sweep.json <<'PY' > $OUT/words_pay.txt; cat $OUT/words_pay.txt
import json, os, sys
results = {}
for path in sys.argv[1:]:
    if os.path.exists(path):
        results.update(json.load(open(path))["results"])
for case, times in results.items():
    plain, words = times.get("default"), times.get("default_isum2")
    pays = isinstance(plain, float) and isinstance(words, float) and words < plain
    print(case, "plain", plain, "ISUM=2", words, "PAYS" if pays else "")
PY
grep -q PAYS $OUT/words_pay.txt || { echo "== ISUM=2 does not pay on the projections: no whole-model A/B"; exit 0; }
mkdir -p /tmp/gemv && tar -xf $OLDPWD/.base/src.tar -C /tmp/gemv
sed -i 's/^    return dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3)$/    return dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3, ISUM=2)/' \
  /tmp/gemv/strata/kernels/packed_q8.py
grep -c "num_stages=3, ISUM=2)" /tmp/gemv/strata/kernels/packed_q8.py | tee $OUT/patched.txt
quantize_q4km
bench_arms 2 1,8,16 src gemv
