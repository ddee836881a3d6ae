# Session 30 call 3 again (issue 29 Q4_K_M with 2 repeats; issue 23 30B-A3B Q4_K_M): after the LM head tiling change.
# Prepared in session 29: the packed models' commands after the LM head's new one-row tiling and the Gated DeltaNet
# output norm's rounding for a packed out_proj (three quantize launches fewer a Qwen4-Exp 4-layer step):
# issue 29's Q4_K_M command (c1 1,121.9 in session 29's call 4, target 1,121.9) and issue 23's 30B-A3B Q4_K_M one.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 130 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 2 --concurrency 1,8,16 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== issue 29 Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4e.log | tail -3 | cut -c1-160
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
LEFT=$(( 560 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 30B Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -4 | cut -c1-200
