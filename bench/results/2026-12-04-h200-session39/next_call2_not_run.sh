# Prepared in session 38 for the next session's second device call: Qwen3-Next 8L at Q4_K_M (in_proj_qkvz now packed;
# prefill lengths now warmed before timing) and issue 23's command, at this commit.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-next-80b-a3b?num_hidden_layers=8' /tmp/next.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant next rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 200 python3 -m strata.cli.main bench offline /tmp/next.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 128,512 \
  --output $OUT/next_q4km.json > $OUT/next_q4km.log 2>&1
echo "== next q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/next_q4km.log | tail -6 | cut -c1-160
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant 30b rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 200 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-160
