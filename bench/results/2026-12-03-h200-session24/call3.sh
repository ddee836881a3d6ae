# Device call 3: the GPU tests of the inference-mode fix, the pairs' tiling sweep (pairs_sweep.py), and
# issue 29's Qwen4-Exp Q4_K_M command at HEAD. carry [".whl", ".base"].
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
echo "== tests"; timeout -s INT 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py -k norm \
  tests/weights/test_packed_gguf.py > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -6 | cut -c1-300
echo "== sweep"; timeout -s INT 200 python3 pairs_sweep.py > $OUT/pairs_sweep.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -v "^fail" $OUT/pairs_sweep.log | cut -c1-600 | tail -12
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 110 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== q4e rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4e.log | tail -3 | cut -c1-200
