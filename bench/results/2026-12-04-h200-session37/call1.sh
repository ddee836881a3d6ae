# Prepared in session 36 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar). 1. --admission-hold-steps 0 / 1 / 2 on issue 28's speculation sweep at 2, 4 and 8 streams
# (each arm its own process: the hold applies to both arms of a run; compare its spec arm and TTFT with hold 0's);
# 2. the 6 GPU tests of test_cuda_graphs.py session 36 did not reach; 3. the tests before
# test_qwen4_exp_graphs_run_dense_steps_and_keep_tokens[mtp] in the order that failed it once (session 36, call 2).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
for H in 0 2 1; do
  timeout -s INT 100 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 \
    --input-len 64 --output-len 128 --concurrency 2,4,8 --repeats 1 --speculative-config "$SPEC" --spec-baseline \
    --admission-hold-steps $H --output $OUT/hold$H.json > $OUT/hold$H.log 2>&1
  echo "== hold $H rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/hold$H.log | tail -6 | cut -c1-200
done
T=tests/runner/test_cuda_graphs.py
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider "$T::test_gpu_float32_greedy_matches_hf_through_the_triton_paths" \
  "$T::test_fresh_prompts_beside_verification_windows_replay_graphs_token_identity" "$T::test_model_that_does_not_fit_gets_a_clear_error" \
  "$T::test_programmatic_dependent_launch_on_off_token_identity" "$T::test_fused_routing_and_folded_topk_sum_match_the_unfused_layers" \
  --tb=short > $OUT/tests_rest.log 2>&1
echo "== rest rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests_rest.log | head -8 | cut -c1-200
LEFT=$(( 575 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider $T -k "evicts or qwen4_exp or 8_bit or fresh_prompts_beside_running or admitted_together" \
  --tb=short > $OUT/tests_order.log 2>&1
echo "== order rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests_order.log | head -8 | cut -c1-200
