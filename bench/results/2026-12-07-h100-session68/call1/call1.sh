# Prepared in session 67 (~8 minutes, any card): the experts meter without host syncs (3b305ce) and the Gated DeltaNet
# recurrence loading each token's inputs one token ahead on 32-column tiles and 2 warps (bench/results/
# 2026-12-07-h100-session67/ timed the kernel alone) — their GPU tests, the recurrence alone at HEAD with its tiling
# sweep (`strata bench kernels --only gdn`), then issue 28's speculation command at 4 streams from HEAD and from
# 8dcd505, and HEAD with STRATA_MIXED_GRAPHS=1 (a prompt step beside verification windows as one graph:
# never measured on Qwen3-Next; session 65's H100 found it slower on Qwen4-Exp); then run_idle.py: where the device
# idles in that run (by step kind), spec and plain.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz 8dcd505 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
run_tests counter_mark_gdn 120 tests/experts/test_routing_stats.py tests/kernels/test_kernels.py -k "gdn or routing_stats or counter"
timeout -s INT 150 python3 -m strata.cli.main bench kernels --only gdn > $OUT/gdn.txt 2>&1; echo "== gdn rc=$? t=$(( $(date +%s)-S ))"
grep gdn_recurrent $OUT/gdn.txt | cut -c1-120
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
spec_c4 next_src_1 src "$NEXT" 90
spec_c4 next_prev_1 prev "$NEXT" 90
[ $(( $(date +%s)-S )) -lt 330 ] && timeout -s INT 110 python3 run_idle.py "$NEXT" > $OUT/idle_next.txt 2>&1; echo "== idle rc=$? t=$(( $(date +%s)-S ))"
grep -vE "^\s*$|Warning|warn" $OUT/idle_next.txt | tail -30
[ $(( $(date +%s)-S )) -lt 400 ] && STRATA_MIXED_GRAPHS=1 spec_c4 next_mixed_1 src "$NEXT" 80
runs_table "next_*.json"
