# Session 68 call (~8 minutes, H200 wanted: the issues' machine): the issues' 4-stream speculation command with the
# admission hold at 1 step (the MoE default) and at 2, alternated: Qwen3-Next 8L (issue 28) and Qwen4-Exp 4L (issue 29).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 next_hold1 src "$NEXT" 90
spec_c4 next_hold2 src "$NEXT" 90 --admission-hold-steps 2
[ $(( $(date +%s)-S )) -lt 300 ] && spec_c4 q4e_hold2 src "$Q4E" 130 --admission-hold-steps 2
[ $(( $(date +%s)-S )) -lt 420 ] && spec_c4 q4e_hold1 src "$Q4E" 130
runs_table "*.json"
