# Prepared in session 31: issue 28's and issue 23's commands after the norm in the routing launch and the
# attention output's epilogue (keep whichever next_call1.sh's A/Bs showed paying); issue 29's
# Qwen4-Exp with PLE on layer 1 (the second variant, last measured in session 15: 544.3 tok/s at one
# stream; a 16M-row table, as then) in bf16.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 130 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1
echo "== issue 28 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/next80_8l.log | tail -3 | cut -c1-160
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 180 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 30B Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -4 | cut -c1-200
LEFT=$(( 570 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=1000000' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --prefill-lens 512 --output $OUT/q4e_ple.json > $OUT/q4e_ple.log 2>&1
echo "== issue 29 bf16 with PLE rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_ple.log | tail -4 | cut -c1-200
