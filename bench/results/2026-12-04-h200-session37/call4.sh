# Session 37, call 4: packed_moe's grouped kernels at BLOCK_M 16 against 64 (grouped_block_m.py); issue 29's
# speculation at 4 streams with --admission-hold-steps 1 (the new default) and 0, each arm its own process.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 100 python3 grouped_block_m.py > $OUT/grouped_block_m.txt 2>&1; echo "== block_m rc=$? t=$(( $(date +%s)-S ))"
cut -c1-200 $OUT/grouped_block_m.txt | grep -v Warn | tail -8
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
for H in 1 0; do
  timeout -s INT 200 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' --device cuda \
    --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 1 \
    --speculative-config "$SPEC" --spec-baseline --admission-hold-steps $H --output $OUT/q4e_hold$H.json > $OUT/q4e_hold$H.log 2>&1
  echo "== issue 29 spec hold $H rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_hold$H.log | tail -2 | cut -c1-200
done
