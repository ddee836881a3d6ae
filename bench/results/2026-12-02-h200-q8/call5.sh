# Session 22, call 5: Q6_K's funnel back to whole-word loads for the second half (A/B against 2ea683f in one
# process: `git show 2ea683f:strata/kernels/packed_q8.py > packed_q8_prev.py`), packed_q8's GPU tests, then issue
# 23's Q4_K_M decode command (issue 29's was left out: too little device time left).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
cp bench/results/2026-12-02-h200-q8/q8_ab3.py . && git show 2ea683f:strata/kernels/packed_q8.py > packed_q8_prev.py  # (call 5 ran it from the archive, where the file was committed)
echo "== tests"; timeout -s INT 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py -x > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -4 | cut -c1-300
echo "== kernels"; timeout -s INT 50 python3 q8_ab3.py > $OUT/q8_ab3.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); cut -c1-200 $OUT/q8_ab3.log | tail -8
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --output $OUT/q4km_q8.json > $OUT/q4km_q8.log 2>&1
echo "== q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km_q8.log | tail -3 | cut -c1-200
