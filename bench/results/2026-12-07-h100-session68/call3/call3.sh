# Session 68 call (~7 minutes, any card): where the issues' 4-stream speculation run spends its prompt-carrying steps
# (run_idle.py: device idle by step kind, and per step kind the host time, the device-busy time and the kernels
# started in it), on Qwen3-Next 8L (spec, plain, mixed graphs) and Qwen4-Exp 4L (spec, mixed); then issue 28's
# command with --admission-hold-steps 2 (session 65 measured 1.48x against 1.45x on Qwen4-Exp).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
timeout -s INT 170 python3 run_idle.py "$NEXT" arms=spec,mixed,plain > $OUT/idle_next.txt 2>&1; echo "== idle next rc=$? t=$(( $(date +%s)-S ))"
grep -vE "^\s*$|Warning|warn" $OUT/idle_next.txt | tail -80 | cut -c1-150
[ $(( $(date +%s)-S )) -lt 250 ] && timeout -s INT 130 python3 run_idle.py "$Q4E" arms=spec,mixed > $OUT/idle_q4e.txt 2>&1; echo "== idle q4e rc=$? t=$(( $(date +%s)-S ))"
grep -vE "^\s*$|Warning|warn" $OUT/idle_q4e.txt | tail -60 | cut -c1-150
[ $(( $(date +%s)-S )) -lt 390 ] && spec_c4 next_hold2 src "$NEXT" 90 --admission-hold-steps 2
runs_table "next_*.json"
