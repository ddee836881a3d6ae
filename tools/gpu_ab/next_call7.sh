# Prepared in session 42 (after next_call6.sh): the CPU expert pool on the H200 host's 16 cores. (1) pool_lines_ab.sh:
# the pool's shared counters on cache lines of their own against the committed layout, 1-8 pairs (the cost model
# behind --zero-copy-frac auto has a fixed ~90 us a call: is it the pool?); (2) prefetch_ab.sh's two leading arms.
# Build the archive first: git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 280 bash tools/gpu_ab/pool_lines_ab.sh > $OUT/pool_lines_ab.txt 2>&1
echo "== pool lines rc=$? t=$(( $(date +%s)-S ))"; cut -c1-600 $OUT/pool_lines_ab.txt
timeout -s INT 250 bash tools/gpu_ab/prefetch_ab.sh 4:3 8:3 > $OUT/prefetch_ab.txt 2>&1
echo "== prefetch rc=$? t=$(( $(date +%s)-S ))"; cut -c1-400 $OUT/prefetch_ab.txt
