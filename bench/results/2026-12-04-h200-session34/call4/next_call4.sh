# Session 34, call 4: issue 29's speculation (synthetic L = 3, k = 3) against none with verification steps planned
# ahead, 4 streams first (the issue's 1.5x target), then 1 (call 3's run of it hit its time limit while loading).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 330 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4,1 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/q4e_spec.json > $OUT/q4e_spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/q4e_spec.log | tail -4 | cut -c1-200
