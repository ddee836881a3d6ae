# Session 32, call 5: the MTP graph-identity test (failing in bf16 since session 20) in float32, and bf16 again with
# the margin printed by the test's failure (-vv).
source tools/gpu_ab/device_setup.sh
timeout -s INT 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py --tb=short -vv \
  -k "fresh_prompts_beside_verification_windows_replay_graphs_token_identity" > $OUT/mtp_test.log 2>&1
echo "== rc=$?"; grep -E "PASSED|FAILED|passed|failed|^E " $OUT/mtp_test.log | head -12 | cut -c1-200
