# Session 64 (~8 minutes, any card): the GPU tests of steps planned ahead (a request's end no longer breaks the
# chain), then issue 29's speculation at 4 streams (Qwen4-Exp 4L; two repeats) at HEAD, the same with
# STRATA_EAGER_MIXED_STEPS=1 (a fresh prompt beside verification windows in one eager pass over the weights, where
# graphs replay the prompt's graph and the windows' graph: two passes), then d877521 while time is left.
# (A session 64 H100 run: a spec step carrying a prompt took ~10.5 ms against ~3 ms without, 21-26 of them a run.)
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz d877521 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests ahead 100 tests/spec/test_verify_ahead.py tests/engine/test_async_scheduling.py tests/runner/test_cuda_graphs.py \
  -k "ahead or moved or async or fresh_prompts"
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 q4e_src src "$Q4E" 160
export STRATA_EAGER_MIXED_STEPS=1; spec_c4 q4e_eagermixed src "$Q4E" 120; unset STRATA_EAGER_MIXED_STEPS
[ $(( $(date +%s)-S )) -lt 340 ] && spec_c4 q4e_prev prev "$Q4E" 110
