# Prepared in session 69 (~9 minutes, any card): prompts queued behind the verification steps in flight
# (STRATA_PROMPTS_AHEAD=1, runner/planned_prompts.py; opt-in until this runs) — its GPU tests and the steps-ahead
# ones, then issue 29's speculation command at 4 streams on Qwen4-Exp 4L with it off and on (one tree; the first arm's
# first repeat pays the cold compile caches), then issue 28's on Qwen3-Next 8L off and on.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests prompts_ahead 100 tests/spec/test_prompts_ahead.py tests/spec/test_verify_ahead.py
EXP='random:qwen4exp-125b?num_hidden_layers=4'
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
spec_c4 exp_off_1 src "$EXP" 170
STRATA_PROMPTS_AHEAD=1 spec_c4 exp_on_1 src "$EXP" 130
[ $(( $(date +%s)-S )) -lt 380 ] && spec_c4 next_off_1 src "$NEXT" 100
[ $(( $(date +%s)-S )) -lt 470 ] && STRATA_PROMPTS_AHEAD=1 spec_c4 next_on_1 src "$NEXT" 100
runs_table "*_o*.json"
