# Prepared in session 38 for the next session's first device call (carry [".whl", ".base"]). Build both archives:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#   git archive a3c5434 -o .base/prev.tar   (the commit before 3002750's tile-scale change)
# 1. GPU tests of what session 38 changed without a GPU (Qwen3-Next's in_proj_qkvz of two types kept packed,
#    PackedWeight.reordered; packed_mmq's Q8_0 / Q5_0 rows; the tiles' scale layouts); 2. 3002750 against a3c5434:
#    the grouped kernels and every expert dequantized (GROUPED_ARMS=base) and issue 23's prefill, trees alternated;
#    3. packed_mmq's tilings incl. Qwen4-Exp's Q8_0 down rows (whether packed_moe should send them there).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev && cp /tmp/src/tools/gpu_ab/*.py /tmp/prev/
timeout -s INT 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/weights/test_packed_gguf.py tests/kernels/test_packed_mmq.py \
  tests/kernels/test_packed_moe.py tests/kernels/test_packed_gemv.py -x > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in a b; do for TREE in /tmp/prev /tmp/src; do
  (cd $TREE && OUT=/tmp PYTHONPATH=$TREE:/tmp/site:/tmp/hf GROUPED_ARMS=base PROMPT_TOKENS=128,512 timeout -s INT 60 \
    python3 prompt_moe_ab.py) >> $OUT/ab_moe_$(basename $TREE).txt 2>&1
  (cd $TREE && PYTHONPATH=$TREE:/tmp/site:/tmp/hf timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 16 --concurrency 1 --repeats 2 \
    --prefill-lens 128,512) > /tmp/pf.log 2>&1
  echo "== $(basename $TREE) $R t=$(( $(date +%s)-S ))" | tee -a $OUT/ab_prefill.log; grep prefill_ /tmp/pf.log | tee -a $OUT/ab_prefill.log
done; done
grep -h "tokens" $OUT/ab_moe_*.txt | cut -c1-200
GROUPED_ARMS=mmq PROMPT_TOKENS=128,256,512 timeout -s INT 120 python3 prompt_moe_ab.py > $OUT/mmq_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -E "tokens|failed" $OUT/mmq_sweep.txt | cut -c1-400
