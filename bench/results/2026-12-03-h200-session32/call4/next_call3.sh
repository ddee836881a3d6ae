# Session 32, call 4: issue 28's speculation command over 1-32 streams, issue 29's over 1-16 (bf16), issue 29 with
# PLE at 8 streams again (call 3: 3,598.2 against 3,630), and the MTP graph-identity test failing since session 20
# (its full output, to read).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 200 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,2,4,8,16,32 --repeats 2 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/next80_spec.json > $OUT/next80_spec.log 2>&1
echo "== issue 28 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/next80_spec.log | tail -14 | cut -c1-200
timeout -s INT 150 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,4,8,16 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/q4e_spec.json > $OUT/q4e_spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/q4e_spec.log | tail -10 | cut -c1-200
timeout -s INT 90 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=1000000' \
  --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 8 --repeats 2 \
  --output $OUT/q4e_ple_c8.json > $OUT/q4e_ple_c8.log 2>&1
echo "== issue 29 PLE c8 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_ple_c8.log | tail -2 | cut -c1-200
LEFT=$(( 560 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py --tb=long -x \
  -k "fresh_prompts_beside_verification_windows_replay_graphs_token_identity and mtp" > $OUT/mtp_test.log 2>&1
echo "== mtp test rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed" $OUT/mtp_test.log | head -5 | cut -c1-200
