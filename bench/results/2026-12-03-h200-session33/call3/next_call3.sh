# Session 33 call 3: the two Qwen4-Exp graph tests with PLE that calls 1-2's time limits cut (fused PLE the default),
# then issue 29's synthetic speculation sweep with the fused PLE (session 32: 1.62x at 1, 1.21x at 4, 1.18x at 8).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py --tb=short \
  -k "test_qwen4_exp_graphs_replay_steps_past_the_qsa_budget and host_kv or host_ple_table" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
LEFT=$(( 440 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,4,8,16 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/q4e_spec.json > $OUT/q4e_spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/q4e_spec.log | tail -10 | cut -c1-200
