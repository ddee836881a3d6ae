# Session 64's last device minutes (~4.5 minutes, any card): the GPU tests of steps planned ahead (a request's end
# no longer breaks the chain; a step left in flight after a run is drained), then issue 29's speculation at 4
# streams (Qwen4-Exp 4L, two repeats) at HEAD. next_call85.sh has the eager-prompt and d877521 arms beside it.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests ahead 85 tests/spec/test_verify_ahead.py tests/engine/test_async_scheduling.py -k "ahead or moved or async"
spec_c4 q4e_src src 'random:qwen4exp-125b?num_hidden_layers=4' 150
