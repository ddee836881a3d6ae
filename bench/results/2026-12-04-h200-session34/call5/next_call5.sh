# Session 34, call 5: issue 29's speculation at 8 and 16 streams with verification planned ahead (never below 1.0x).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 200 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 8,16 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/q4e_spec_c8.json > $OUT/q4e_spec_c8.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/q4e_spec_c8.log | tail -4 | cut -c1-200
