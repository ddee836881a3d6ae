# Session 65 (~8.5 minutes, any card): the GPU tests of steps planned ahead (3a6de31, 6548c5b, 815c0ca), then issue
# 29's speculation at 4 streams (Qwen4-Exp 4L, two repeats) at HEAD, with STRATA_EAGER_MIXED_STEPS=1 (a fresh prompt
# beside verification windows in one eager pass, where graphs read the weights twice), and with an admission hold of
# 2 steps (prompts admitted together more often: session 64 counted 21-26 prompt steps with speculation against 8).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests ahead 90 tests/spec/test_verify_ahead.py tests/engine/test_async_scheduling.py -k "ahead or moved or async"
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 q4e_src src "$Q4E" 160
export STRATA_EAGER_MIXED_STEPS=1; spec_c4 q4e_eagermixed src "$Q4E" 110; unset STRATA_EAGER_MIXED_STEPS
[ $(( $(date +%s)-S )) -lt 400 ] && spec_c4 q4e_hold2 src "$Q4E" 110 --admission-hold-steps 2
