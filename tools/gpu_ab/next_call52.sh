# Session 52 (~5 minutes; run first): the pairs' GPU tests at the defaults after fffb677 (the sweep's several-token
# tilings only for Q4_K / Q5_K gate/up with K-quant down rows), then pairs_isum_diag.py: which of tiling and ISUM
# fails (IQ1_S, IQ1_M) and (Q6_K, Q4_K) at several tokens.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 140 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "pair" -p no:cacheprovider \
  > $OUT/tests_pairs.log 2>&1; echo "== pairs tests rc=$? t=$(( $(date +%s)-S ))"; tail -4 $OUT/tests_pairs.log | cut -c1-300
timeout -s INT 150 python3 pairs_isum_diag.py 2>&1 | tail -30; echo "== diag t=$(( $(date +%s)-S ))"
