# Session 39, call 4: where an 8-stream (and a one-stream) decode step of the 30B-A3B Q4_K_M goes now (critical-path
# kernel times, trace_steps.py); Qwen3-Next 8L at Q4_K_M (in_proj_qkvz kept packed; packed_mmq's new dispatch).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 120 python3 trace_steps.py /tmp/q4km.gguf /tmp/trace 1 8 > $OUT/trace_steps.txt 2>&1
echo "== trace rc=$? t=$(( $(date +%s)-S ))"; head -c 2500 $OUT/trace_steps.txt
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-next-80b-a3b?num_hidden_layers=8' /tmp/next.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant next rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/next.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 128,512 \
  --output $OUT/next_q4km.json > $OUT/next_q4km.log 2>&1
echo "== next q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/next_q4km.log | tail -6 | cut -c1-160
