# Prepared in session 46 (no device lent): can the SMs stage offloaded experts faster than they read them in place?
# zero_copy_ab.py's new arms copy one token's experts from pinned host memory into device slots with
# kernels/sm_copy.gather_rows (a kernel reading the device's list of experts: no host work, graph-capturable), alone
# and then run by the pairs kernel, beside session 42's arms (in place 22-27 GB/s; copy engine 43-47 GB/s). If
# "sm stage + run" beats "zero copy" clearly, the zero-copy tier should stage by SMs inside the graph instead.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sm_gather.py > $OUT/tests_sm_gather.log 2>&1
echo "== gather test rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_sm_gather.log
timeout -s INT 240 python3 zero_copy_ab.py pairs=1,3,6,8 > $OUT/zero_copy_sm_stage.txt 2>&1
echo "== zero copy A/B rc=$? t=$(( $(date +%s)-S ))"; cut -c1-600 $OUT/zero_copy_sm_stage.txt
