# Session 69 (any card, ~9 minutes): prompts queued behind a step in flight (Scheduler.schedule_prompts_ahead,
# runner/planned_prompts.py) — the GPU tests of it and of the steps planned ahead, then issue 29's speculation
# command at 4 streams on Qwen4-Exp 4L from HEAD, from e1d4ab3 (before it), and HEAD with --admission-hold-steps 0
# (the default hold of one step for MoE models keeps some prompts out of it).
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz e1d4ab3 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
run_tests prompts_ahead 110 tests/spec/test_prompts_ahead.py tests/spec/test_verify_ahead.py tests/engine/test_async_scheduling.py
EXP='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 exp_src_1 src "$EXP" 150
spec_c4 exp_prev_1 prev "$EXP" 150
[ $(( $(date +%s)-S )) -lt 440 ] && spec_c4 exp_hold0_1 src "$EXP" 140 --admission-hold-steps 0
runs_table "exp_*.json"
