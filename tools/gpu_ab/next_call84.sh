# Session 64 (~9 minutes, any card): the GPU tests of steps planned ahead (a request's end no longer breaks the
# chain), then issue 29's speculation at 4 streams (Qwen4-Exp 4L; two repeats) at HEAD (the
# step left in flight after a run's last request is drained, 4a…) against d877521 (the one-launch roll-back's
# predecessor chain), then issue 28's (Qwen3-Next 8L) the same way while time is left.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz d877521 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests ahead 110 tests/spec/test_verify_ahead.py tests/engine/test_async_scheduling.py tests/runner/test_cuda_graphs.py \
  -k "ahead or moved or async or fresh_prompts"
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
spec_c4 q4e_src src "$Q4E" 170
spec_c4 q4e_prev prev "$Q4E" 110
[ $(( $(date +%s)-S )) -lt 400 ] && spec_c4 next_src src "$NEXT" 100
[ $(( $(date +%s)-S )) -lt 480 ] && spec_c4 next_prev prev "$NEXT" 90
