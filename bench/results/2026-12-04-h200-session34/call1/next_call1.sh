# Prepared in session 33 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar). Untested on a GPU: Q2_K and Q3_K in the Triton kernels (packed_gemv, packed_dequant,
# packed_q8, the MoE pairs and grouped kernels), written in session 33 after its device time. 1. their GPU tests (all of these files: the kernels changed for every type);
# 2. each type's GEMVs against Q4_K's (lowbit_ab.py); 3. the 30B-A3B 24L at q3_k_m (issue 23's command) and q2_k (one
# stream), beside session 32's q4_k_m (656.7 / 1,846.9 / 2,544.2 tok/s, prefill 16,277.1).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 230 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_gemv.py \
  tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py tests/kernels/test_gguf_blocks.py \
  tests/experts/test_packed_experts.py tests/weights/test_packed_gguf.py --tb=short > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
timeout -s INT 60 python3 lowbit_ab.py 1 4 8 > $OUT/lowbit_ab.txt 2>&1
echo "== lowbit_ab rc=$? t=$(( $(date +%s)-S ))"; cut -c1-240 $OUT/lowbit_ab.txt
M='random:qwen3-30b-a3b?num_hidden_layers=24'
timeout -s INT 40 python3 -m strata.cli.main quantize "$M" /tmp/q3km.gguf --scheme q3_k_m --device cuda > /dev/null 2>&1
timeout -s INT 140 python3 -m strata.cli.main bench offline /tmp/q3km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8 --prefill-lens 512 --output $OUT/q3km.json \
  > $OUT/q3km.log 2>&1
echo "== 30B q3_k_m rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q3km.log | tail -4 | cut -c1-200
timeout -s INT 40 python3 -m strata.cli.main quantize "$M" /tmp/q2k.gguf --scheme q2_k --device cuda > /dev/null 2>&1
LEFT=$(( 580 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline /tmp/q2k.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1 --output $OUT/q2k.json > $OUT/q2k.log 2>&1
echo "== 30B q2_k rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q2k.log | tail -2 | cut -c1-200
