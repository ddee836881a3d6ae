# Session 60 (~4 minutes, any card; say which): where the few-row GEMV's time goes. Issue 23's c8 decode step spends
# ~31 us a layer in the attention projections at 8 rows (joined q/k/v 18.6 + o_proj 12.5, session 58's trace), ~10x
# their bytes' copy time, and session 57's tiling sweep found every tiling within ~10 % of the others. Nsight Compute
# (full set, SASS) on one call of each at 8 rows and, to compare, at one row: stall reasons, occupancy, L1 / L2
# traffic of the activations each program re-reads.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo "ncu: $NCU"
for ARM in qkv o; do for ROWS in 8 1; do
  ROWS=$ROWS timeout -s INT 100 $NCU --clock-control none --profile-from-start off --set full --import-source no \
    -o /tmp/ncu_${ARM}$ROWS -f python3 ncu_gemv.py $ARM > /tmp/ncu.log 2>&1; echo "== ncu $ARM $ROWS rc=$? t=$(( $(date +%s)-S ))"
  tail -2 /tmp/ncu.log | cut -c1-300
  $NCU --import /tmp/ncu_${ARM}$ROWS.ncu-rep --page details > $OUT/ncu_${ARM}${ROWS}_details.txt 2>&1
  $NCU --import /tmp/ncu_${ARM}$ROWS.ncu-rep --page source --csv --print-source sass > /tmp/src.csv 2>&1
  python3 ncu_top.py 30 < /tmp/src.csv > $OUT/ncu_${ARM}${ROWS}_top.txt 2>&1
done; done
grep -E "^  [a-z_]+kernel|Duration|Memory Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|L1/TEX Hit|L2 Hit|One or More Eligible|Issued Warp|Block Limit" \
  $OUT/ncu_*_details.txt | cut -c1-200
