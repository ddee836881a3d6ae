# Session 63 (~7 minutes, any card; what the session's last device minutes allowed): the one-launch roll-back's GPU
# tests (ef6a9cd) and the steps planned ahead through queues and holds (6206eee) with the verification-ahead
# tests, then issue 29's speculation at 4 streams (Qwen4-Exp 4L, default PLE; two repeats) at HEAD against d877521
# (the roll-back change alone), the latter only while time is left.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz d877521 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests rollback 130 tests/kernels/test_state_rollback.py tests/cache/test_checkpoint_pool.py tests/spec/test_verify_ahead.py
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 q4e_src src "$Q4E" 170
[ $(( $(date +%s)-S )) -lt 300 ] && spec_c4 q4e_prev prev "$Q4E" 130
