# The packed CPU expert kernel's row prefetch on this host's cores: quant_simd.c's PREFETCH_ROWS (rows ahead) and the
# prefetch's locality hint (3: all cache levels, 2: L2 and out, 0: non-temporal), each arm a build of its own (the
# native build's cache keys on the source), run by qmoe_scale.py (16 threads, 6 and 8 pairs, cold and warm), arms
# alternated twice. Session 40 measured 4 rows against none (cold 371 -> 337 us); under 16 threads the loaded memory
# latency may want more. Run from the unpacked tree (device_setup.sh); it edits that copy only.
# usage: bash prefetch_ab.sh [ROWS:HINT ...]   (default 4:3 8:3 16:3 8:2 16:2)
ARMS=${@:-4:3 8:3 16:3 8:2 16:2}
SRC=strata/kernels/native/quant_simd.c
cp $SRC /tmp/quant_simd.orig.c
for round in 1 2; do
  for ARM in $ARMS; do
    IFS=: read ROWS HINT <<< "$ARM"
    cp /tmp/quant_simd.orig.c $SRC
    sed -i "s/#define PREFETCH_ROWS 4/#define PREFETCH_ROWS $ROWS/; s/__builtin_prefetch(wr + PREFETCH_ROWS \* row_bytes + o)/__builtin_prefetch(wr + PREFETCH_ROWS * row_bytes + o, 0, $HINT)/" $SRC
    grep -q "PREFETCH_ROWS $ROWS" $SRC || { echo "prefetch_ab: could not set PREFETCH_ROWS in $SRC"; exit 1; }
    echo "== rows $ROWS hint $HINT (round $round): $(python3 qmoe_scale.py threads=16 pairs=6,8 2>&1 | cut -d: -f2 | tr '\n' ';')"
  done
done
cp /tmp/quant_simd.orig.c $SRC
