# Session 22, call 2: packed_q8 with per-shape tilings; GPU tests; Qwen3-30B-A3B 24 layers at Q4_K_M with and
# without it (issue 23's command); a kernel profile of its decode steps; Qwen4-Exp 4 layers at Q4_K_M (issue 29).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
echo "== tests"; timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py \
  tests/kernels/test_packed_moe.py tests/kernels/test_packed_gemv.py tests/experts/test_packed_experts.py -k "not test_packed_gemv_matches_ref and not dequant" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8 | cut -c1-300
M='random:qwen3-30b-a3b?num_hidden_layers=24'
timeout -s INT 60 python3 -m strata.cli.main quantize "$M" /tmp/q4km.gguf --scheme q4_k_m --device cuda > $OUT/quantize.log 2>&1
echo quantize rc=$? t=$(( $(date +%s)-S ))
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512"
for arm in q8 float; do
  if [ $arm = float ]; then export STRATA_NO_Q8_ACTIVATIONS=1; else unset STRATA_NO_Q8_ACTIVATIONS; fi
  timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $ARGS --output $OUT/q4km_$arm.json > $OUT/q4km_$arm.log 2>&1
  echo "== $arm rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km_$arm.log | tail -4 | cut -c1-200
done
unset STRATA_NO_Q8_ACTIVATIONS
echo "== profile"; timeout -s INT 90 python3 prof_q4km.py /tmp/q4km.gguf 1 8 > $OUT/prof_q4km.log 2>&1; echo rc=$? t=$(( $(date +%s)-S ))
grep -A14 "=====" $OUT/prof_q4km.log | cut -c1-140
Q='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
timeout -s INT 60 python3 -m strata.cli.main quantize "$Q" /tmp/q4e.gguf --scheme q4_k_m --device cuda > $OUT/quantize_q4e.log 2>&1
echo quantize q4e rc=$? t=$(( $(date +%s)-S ))
timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --output $OUT/q4e_q8.json > $OUT/q4e_q8.log 2>&1
echo "== q4e rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_q8.log | tail -4 | cut -c1-200
