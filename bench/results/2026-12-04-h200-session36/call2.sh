REPO=$PWD
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
t() { echo "== $1 rc=$2 t=$(( $(date +%s)-S ))"; }
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 110 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 \
  --input-len 64 --output-len 128 --concurrency 1,2,4,8,16 --repeats 1 --speculative-config "$SPEC" --spec-baseline --output $OUT/spec.json > $OUT/spec.log 2>&1
t spec $?; grep -E "tok/s" $OUT/spec.log | tail -10 | cut -c1-200
T=tests/runner/test_cuda_graphs.py
timeout -s INT 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/spec/test_verify_ahead.py::test_cuda_mtp_drafts_from_the_device_keep_greedy_output \
  "$T::test_host_kv_blocks_replay_graphs_token_identity" "$T::test_staged_host_kv_replays_graphs_token_identity" \
  "$T::test_fresh_prompts_beside_verification_windows_replay_graphs_token_identity" --tb=short > $OUT/tests_d.log 2>&1
t tests_d $?; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests_d.log | head -12 | cut -c1-250
R=$(( 575 - ($(date +%s)-S) ))
timeout -s INT $R python3 -m pytest -q -m gpu -p no:cacheprovider $T -k "evicts or qwen4_exp or 8_bit or fresh_prompts_beside_running or admitted_together" --tb=short > $OUT/tests_e.log 2>&1
t tests_e $?; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests_e.log | head -12 | cut -c1-250
