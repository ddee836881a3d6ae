# Prepared in session 34 for a later call: branch s34-packed-q8 (packed_q8 rewritten for Q3_K, no row masks, the
# i-quants with 8-bit activations), never run on a GPU. Build .base from that branch:
#   git archive s34-packed-q8 -o .base/src.tar && git rev-parse --short s34-packed-q8 > .base/COMMIT
# 1. the packed kernels' GPU tests (every type: the masks changed for all); 2. their GEMVs against main's numbers
# (session 34 call 1: Q3_K 10.9 us a 4096 x 2048 row, Q4_K 4.7; i-quants 7.4-9.5 on the float kernels); 3. the
# 30B-A3B 24L at q4_k_m and q3_k_m (issue 23's command). Merge the branch if 1 passes and 2-3 do not lose.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py \
  tests/kernels/test_packed_gemv.py tests/experts/test_packed_experts.py --tb=short -x > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
LOWBIT_TYPES=Q2_K,Q3_K,Q4_K,Q6_K,IQ2_XXS,IQ3_XXS,IQ3_S timeout -s INT 60 python3 lowbit_ab.py 1 4 8 > $OUT/lowbit.txt 2>&1
echo "== lowbit rc=$? t=$(( $(date +%s)-S ))"; grep q_proj $OUT/lowbit.txt | cut -c1-220
M='random:qwen3-30b-a3b?num_hidden_layers=24'
for SCHEME in q4_k_m q3_k_m; do
  timeout -s INT 40 python3 -m strata.cli.main quantize "$M" /tmp/$SCHEME.gguf --scheme $SCHEME --device cuda > /dev/null 2>&1
  timeout -s INT 110 python3 -m strata.cli.main bench offline /tmp/$SCHEME.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8 --output $OUT/$SCHEME.json > $OUT/$SCHEME.log 2>&1
  echo "== 30B $SCHEME rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/$SCHEME.log | tail -2 | cut -c1-200
done
