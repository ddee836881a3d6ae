# Prepared in session 40 for the next session's second device call: issues 28 and 29's speculation at 4 streams
# (targets 1.6x / 1.5x none), their commands as the issues give them, on HEAD (not measured since session 39).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 250 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' \
  --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 2 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/i28_spec_c4.json > $OUT/i28_spec_c4.log 2>&1
echo "== issue 28 spec c4 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/i28_spec_c4.log | tail -3 | cut -c1-200
timeout -s INT 250 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' \
  --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 2 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/i29_spec_c4.json > $OUT/i29_spec_c4.log 2>&1
echo "== issue 29 spec c4 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/i29_spec_c4.log | tail -3 | cut -c1-200
