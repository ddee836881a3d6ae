# The CPU pool's shared counters (quant_matmul.c: pool_generation, pool_limit, pool_ticket, pool_done, pool_job) on
# cache lines of their own against adjacent statics (the tree as committed): every item's claim (a CAS on
# pool_ticket) and finish (an add on pool_done) bounces one line between 16 cores, and workers between jobs poll
# pool_generation on it. Each arm its own build (the native build's cache keys on the source), run by qmoe_scale.py
# at 16 threads on 1-8 pairs (a fixed cost a call shows at few pairs), arms alternated twice. Prepared in session 42
# (the development VM's 2 cores cannot show it). Run from the unpacked tree (device_setup.sh); it edits that copy only.
# usage: bash pool_lines_ab.sh
SRC=strata/kernels/native/quant_matmul.c
cp $SRC /tmp/quant_matmul.orig.c
for round in 1 2; do
  for ARM in adjacent lines; do
    cp /tmp/quant_matmul.orig.c $SRC
    if [ $ARM = lines ]; then
      sed -i -E 's/^static (uint32_t pool_generation|uint64_t pool_limit|uint64_t pool_ticket|int64_t pool_done|job_t pool_job)/static __attribute__((aligned(64))) \1/' $SRC
      [ $(grep -c "^static __attribute__((aligned(64)))" $SRC) -eq 5 ] || { echo "pool_lines_ab: could not align the counters in $SRC"; exit 1; }
    fi
    echo "== $ARM (round $round): $(python3 qmoe_scale.py threads=16 pairs=1,2,3,4,6,8 2>&1 | cut -d: -f2 | tr '\n' ';')"
  done
done
cp /tmp/quant_matmul.orig.c $SRC
