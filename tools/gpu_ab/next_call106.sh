# Prepared in session 69 (~9 minutes, any card; after next_call105.sh): prompts queued behind the verification steps
# in flight (STRATA_PROMPTS_AHEAD=1) without the MoE models' default admission hold of one step, which keeps some
# prompts out of it (--admission-hold-steps 0), off and on, on Qwen4-Exp 4L (issue 29) and Qwen3-Next 8L (issue 28).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
EXP='random:qwen4exp-125b?num_hidden_layers=4'
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
STRATA_PROMPTS_AHEAD=1 spec_c4 exp_on_hold0 src "$EXP" 170 --admission-hold-steps 0
spec_c4 exp_off_hold0 src "$EXP" 130 --admission-hold-steps 0
[ $(( $(date +%s)-S )) -lt 370 ] && STRATA_PROMPTS_AHEAD=1 spec_c4 next_on_hold0 src "$NEXT" 110 --admission-hold-steps 0
[ $(( $(date +%s)-S )) -lt 470 ] && spec_c4 next_off_hold0 src "$NEXT" 110 --admission-hold-steps 0
runs_table "*_hold0.json"
