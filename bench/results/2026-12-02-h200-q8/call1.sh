# Session 22, packed_q8 on the H200: its GPU tests, the kernel A/B (q8_ab.py), then the 24-layer Qwen3-30B-A3B
# shape at Q4_K_M with and without it (STRATA_NO_Q8_ACTIVATIONS=1: the float decoders), issue 23's command.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
echo "== tests"; timeout -s INT 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py \
  tests/kernels/test_packed_gemv.py -k "q8 or rounded or packed_linear or quantize or strided or moe_pairs" -x > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8 | cut -c1-300
echo "== kernels"; timeout -s INT 200 python3 q8_ab.py > $OUT/q8_ab.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -v "^ERROR" $OUT/q8_ab.log | cut -c1-400; grep -c "^ERROR" $OUT/q8_ab.log; grep -m3 "^ERROR" $OUT/q8_ab.log | cut -c1-400
M='random:qwen3-30b-a3b?num_hidden_layers=24'
timeout -s INT 60 python3 -m strata.cli.main quantize "$M" /tmp/q4km.gguf --scheme q4_k_m --device cuda > $OUT/quantize.log 2>&1
echo quantize rc=$? t=$(( $(date +%s)-S ))
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512"
for arm in q8 float; do
  if [ $arm = float ]; then export STRATA_NO_Q8_ACTIVATIONS=1; fi
  timeout -s INT 105 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $ARGS --output $OUT/q4km_$arm.json > $OUT/q4km_$arm.log 2>&1
  echo "== $arm rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|prefill" $OUT/q4km_$arm.log | tail -6 | cut -c1-200
done
