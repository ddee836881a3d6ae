# Prepared in session 38 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar). 1. GPU tests of what session 38 changed without a GPU: Qwen3-Next's in_proj_qkvz of two
# block types kept packed (PackedWeight.reordered) and packed_moe's paths; 2. Qwen3-Next 8L at Q4_K_M (qkvz now
# packed; prefill lengths now warmed before timing); 3. issue 23's command at this commit; packed_mmq's Q8_0 rows.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/weights/test_packed_gguf.py \
  tests/kernels/test_packed_mmq.py tests/kernels/test_packed_moe.py tests/experts/test_packed_experts.py > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
# packed_mmq on Qwen4-Exp's experts (Q4_K gate/up, Q8_0 down of 640): whether packed_moe should send them there
GROUPED_ARMS=mmq PROMPT_TOKENS=128,256,512 timeout -s INT 150 python3 prompt_moe_ab.py > $OUT/mmq_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -E "tokens|failed" $OUT/mmq_sweep.txt | cut -c1-400
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-next-80b-a3b?num_hidden_layers=8' /tmp/next.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant next rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/next.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 128,512 \
  --output $OUT/next_q4km.json > $OUT/next_q4km.log 2>&1
echo "== next q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/next_q4km.log | tail -6 | cut -c1-160
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant 30b rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-160
