# Session 63 (~9 minutes, any card): the one-launch roll-back's GPU tests (ef6a9cd) first; then the chain of planned verification steps kept up
# to a request's end (f506b35, uniform windows) against the roll-back change alone (d877521), issue 29's
# speculation at 4 streams (two repeats) and issue 28's, then admission holds of 2 and 3 steps against the default 1
# on issue 29 (a 64-token prompt step reads most experts of a 512-expert layer, ~7 ms; speculation staggers the
# requests' ends, so successors' prompts take a step each where without it they come in waves).
# (Session 63: HEAD holds the one-launch roll-back too; holds of 3 steps dropped for time.)
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz d877521 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests rollback 120 tests/kernels/test_state_rollback.py tests/spec/test_verify_ahead.py
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
spec_c4 q4e_src src "$Q4E" 160
spec_c4 q4e_prev prev "$Q4E" 130
spec_c4 next_src src "$NEXT" 80
spec_c4 next_prev prev "$NEXT" 80
[ $(( $(date +%s)-S )) -lt 480 ] && spec_c4 q4e_hold2 src "$Q4E" 110 --admission-hold-steps 2
