# Prepared in session 29: the next session's second device call.
# 1. the LM heads' GEMV tilings past 16 rows a program (32, 64) and for 2-8 rows (verification and 8-stream heads);
# 2. issue 28's speculation command (synthetic L = 3, k = 3 at 4 streams, 2 repeats) and issue 29's at 1/4/8/16.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
for rows in 1 4 8; do timeout -s INT 70 python3 head_sweep.py $rows wide > $OUT/head_sweep_r$rows.txt 2>&1; grep "==" $OUT/head_sweep_r$rows.txt; done
echo "== head sweeps t=$(( $(date +%s)-S ))"
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 200 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 2 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/next80_spec.json > $OUT/next80_spec.log 2>&1
echo "== issue 28 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "spec_c" $OUT/next80_spec.log | tail -4 | cut -c1-160
LEFT=$(( 580 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' \
  --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,4,8,16 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/q4e_spec.json > $OUT/q4e_spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "spec_c" $OUT/q4e_spec.log | tail -8 | cut -c1-160
