# For the next session's first call (prepared in session 49, ~6 minutes): (1) the CPU pool's shared counters on
# their own cache lines with one done-add a thread a job (8c3dd64) against before (c1c380c's pool), quant_moe alone on
# the host's 8 / 16 threads (qmoe_scale.py, three rounds alternated; on 2 threads no difference), beside this tree with
# the row kernels' prefetch 8 rows ahead instead of 4 (pf8: 16 threads share the bandwidth, so the loads may need to be
# asked for earlier); (2) next_call33.sh (offloaded prompts streamed over PCIe from lower pair counts).
# Build the archives first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#                            git archive c1c380c -o .base/old.tar
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/old /tmp/pf8 && tar -xf $OLDPWD/.base/old.tar -C /tmp/old && cp tools/gpu_ab/qmoe_scale.py /tmp/old/
tar -xf $OLDPWD/.base/src.tar -C /tmp/pf8 && cp tools/gpu_ab/qmoe_scale.py /tmp/pf8/
sed -i 's/^#define PREFETCH_ROWS 4$/#define PREFETCH_ROWS 8/' /tmp/pf8/strata/kernels/native/quant_simd.c
grep -c "define PREFETCH_ROWS 8" /tmp/pf8/strata/kernels/native/quant_simd.c
for R in 1 2 3; do for T in old src pf8; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 90 python3 qmoe_scale.py threads=8,16 pairs=6,8 \
    >> $OUT/qmoe_$T.txt 2>&1); echo "== qmoe $T round $R rc=$? t=$(( $(date +%s)-S ))"
done; done
for T in old src pf8; do echo "-- $T"; grep threads $OUT/qmoe_$T.txt; done
cd $OLDPWD && bash tools/gpu_ab/next_call33.sh
