# Session 32, call 3: issue 29's Qwen4-Exp with PLE on layer 1 in bf16 (the issue's second variant; a 1M-row table),
# then issue 28 at 8 streams twice more (call 2: 3,915.6 against the target 3,933).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 300 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=1000000' \
  --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --prefill-lens 512 --output $OUT/q4e_ple.json > $OUT/q4e_ple.log 2>&1
echo "== issue 29 bf16 with PLE rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_ple.log | tail -5 | cut -c1-200
LEFT=$(( 540 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 8 --repeats 2 \
  --output $OUT/next80_c8.json > $OUT/next80_c8.log 2>&1
echo "== issue 28 c8 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/next80_c8.log | tail -3 | cut -c1-200
