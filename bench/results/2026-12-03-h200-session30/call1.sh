# Prepared in session 29 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says
# how to build .base/src.tar). Then next_call2.sh, next_call3.sh, next_call4.sh.
# 1. GPU tests of session 29's changes not yet run on a GPU: parks queued on the stream (the no-wait launch test now
#    parks inside launches; parked conversations on CUDA), and a re-run of the graph identity set (the Qwen3-Next
#    MTP case beside verification windows failed since session 20; the gated sums now round as torch does), the
#    Gated DeltaNet output norm rounding its rows for a packed out_proj;
# 2. issue 28's bench command and issue 29's bf16 command: the parks no longer make a planned-ahead decode launch
#    wait (bench_prof at 8 streams: 3,802 vs 3,437 tok/s between runs with and without parks).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 250 python3 -m pytest -v -m gpu -p no:cacheprovider tests/engine/test_async_scheduling.py \
  tests/cache/test_prefix_cache.py tests/runner/test_cuda_graphs.py tests/kernels/test_packed_q8.py --tb=short -k "never_waits or parked_conversations \
  or graph_on_off_token_identity or qwen4_exp_graphs or host_ple_table or beside_verification or gated_norm_rounds \
  or greedy_matches_hf_through" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed" $OUT/tests.log | cut -c1-200
timeout -s INT 170 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --prefill-lens 512 --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1
echo "== issue 28 bench rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|prefill" $OUT/next80_8l.log | tail -4 | cut -c1-160
LEFT=$(( 580 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' \
  --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 \
  --repeats 1 --prefill-lens 512 --output $OUT/q4e_bf16.json > $OUT/q4e_bf16.log 2>&1
echo "== issue 29 bf16 bench rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|prefill" $OUT/q4e_bf16.log | tail -4 | cut -c1-160
