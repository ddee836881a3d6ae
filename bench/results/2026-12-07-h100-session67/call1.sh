# Session 67, short (~4 minutes, any card): the GPU tests of the Gated DeltaNet recurrence loading a token ahead and of
# the experts meter's CounterMark, the recurrence alone from HEAD and from 8dcd505 (gdn_ab.py), then its tiling sweep.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz 8dcd505 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
run_tests counter_mark_gdn 90 tests/experts/test_routing_stats.py tests/kernels/test_kernels.py -k "gdn or counter"
for T in src prev; do (cd /tmp/$T && cp /tmp/src/gdn_ab.py . && PYTHONPATH=/tmp/$T:/tmp/site timeout -s INT 45 python3 gdn_ab.py \
  > $OUT/gdn_$T.txt 2>&1; echo "== gdn_ab $T rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/gdn_$T.txt | tail -7); done
timeout -s INT $(( 230-$(date +%s)+S )) python3 gdn_ab.py sweep > $OUT/gdn_sweep.txt 2>&1; echo "== sweep rc=$? t=$(( $(date +%s)-S ))"
cat $OUT/gdn_sweep.txt
