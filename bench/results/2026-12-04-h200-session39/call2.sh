# Session 39, call 2: GPU tests of packed_mmq (its Q8_0 / Q5_0 rows now dispatched; linear_q8, new), the reordered
# weight; linear_mmq_ab (where linear_q8 should take dense projections); issue 23's command at this commit.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_mmq.py \
  tests/weights/test_packed_gguf.py -k "mmq or linear or grouped or reordered or qkvz or step_size or take" tests/kernels/test_packed_moe.py \
  > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
timeout -s INT 150 python3 linear_mmq_ab.py > $OUT/linear_mmq_ab.txt 2>&1
echo "== linear ab rc=$? t=$(( $(date +%s)-S ))"; cut -d';' -f1 $OUT/linear_mmq_ab.txt | tail -30
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 200 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-160
