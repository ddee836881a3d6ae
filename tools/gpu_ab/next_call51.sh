# Session 52: which of the sweep's tilings and ISUM makes the pairs' GPU tests fail (pairs_isum_diag.py).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 200 python3 pairs_isum_diag.py 2>&1 | tail -30; echo "== diag t=$(( $(date +%s)-S ))"
