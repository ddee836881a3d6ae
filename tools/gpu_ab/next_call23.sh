# Session 48: the MoE pairs grouped by expert (kernels/packed_q8_grouped.py: each used expert read once per block
# of its pairs, not once per pair). (1) its GPU tests, (2) grouped_pairs_sweep.py: the 30B-A3B's experts at 2 / 8 /
# 16 / 64 tokens against packed_q8's pairs, over tilings (and Qwen4-Exp's at 16 / 64), (3) issue 23's command at 1 and 8 streams with
# STRATA_GROUPED_PAIRS=1 against without (c1's prompts of 64 tokens are 512 pairs; c8's decode steps 64).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py tests/kernels/test_fused_ops.py -k grouped \
  > $OUT/tests_grouped.log 2>&1
echo "== grouped GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_grouped.log | tail -5
timeout -s INT 200 python3 grouped_pairs_sweep.py > $OUT/grouped_pairs_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -v "^fail" $OUT/grouped_pairs_sweep.txt | cut -c1-220 | head -30
SHAPE=q4e TOKENS=16,64 timeout -s INT 120 python3 grouped_pairs_sweep.py > $OUT/grouped_pairs_sweep_q4e.txt 2>&1
echo "== sweep q4e rc=$? t=$(( $(date +%s)-S ))"; grep -v "^fail" $OUT/grouped_pairs_sweep_q4e.txt | cut -c1-220 | head -12
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for G in 0 1; do
  STRATA_GROUPED_PAIRS=$G timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 \
    --output $OUT/c18_grouped$G.json > $OUT/c18_grouped$G.log 2>&1
  echo "== c1/c8 GROUPED_PAIRS=$G rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/c18_grouped$G.log | cut -c1-200
done
