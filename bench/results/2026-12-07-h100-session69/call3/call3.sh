# Session 69 (any card, ~3 minutes): decode attention's split count across 1-32 sequences and 256-16K contexts for
# the split heuristic's programs a multiprocessor (attn_splits_ab.py), both geometries.
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 400 python3 attn_splits_ab.py > $OUT/attn_splits.txt 2>&1; echo "== splits rc=$? t=$(( $(date +%s)-S ))"
grep -v Warn $OUT/attn_splits.txt | cut -c1-200
