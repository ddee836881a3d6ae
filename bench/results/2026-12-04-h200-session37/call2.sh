# Session 37, call 2: where a prompt step's time goes on issue 28's model (prompt_step_prof.py), bf16 fused_moe
# tilings at prompt sizes (moe_prompt_tiles.py), issue 23's Q4_K_M command after packed_q8's merge.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 120 python3 prompt_step_prof.py > $OUT/prompt_step_prof.txt 2>&1; echo "== prof rc=$? t=$(( $(date +%s)-S ))"
grep -v Warn $OUT/prompt_step_prof.txt | head -24 | cut -c1-160
timeout -s INT 170 python3 moe_prompt_tiles.py > $OUT/moe_prompt_tiles.txt 2>&1; echo "== tiles rc=$? t=$(( $(date +%s)-S ))"
cut -c1-400 $OUT/moe_prompt_tiles.txt | tail -5
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m \
  --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -8 | cut -c1-200
