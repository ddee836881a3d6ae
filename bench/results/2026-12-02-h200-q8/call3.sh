# Session 22, call 3: packed_q8 with integer sums per scale group and direct bf16 column writes (A/B against
# b3bb843's kernels in one process), GPU tests, Qwen3-30B-A3B 24 layers at Q4_K_M (issue 23: decode, and
# 25 % / 50 % of experts on the GPU with 16 CPU threads), Qwen4-Exp 4 layers at Q4_K_M (issue 29).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
echo "== tests"; timeout -s INT 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py \
  tests/kernels/test_packed_moe.py tests/kernels/test_packed_gemv.py tests/experts/test_packed_experts.py \
  -k "not test_packed_gemv_matches_ref and not dequant" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8 | cut -c1-300
echo "== kernels"; timeout -s INT 120 python3 q8_ab2.py > $OUT/q8_ab2.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); cut -c1-200 $OUT/q8_ab2.log | tail -20
M='random:qwen3-30b-a3b?num_hidden_layers=24'
timeout -s INT 60 python3 -m strata.cli.main quantize "$M" /tmp/q4km.gguf --scheme q4_k_m --device cuda > $OUT/quantize.log 2>&1
echo quantize rc=$? t=$(( $(date +%s)-S ))
timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km_q8.json > $OUT/q4km_q8.log 2>&1
echo "== q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km_q8.log | tail -4 | cut -c1-200
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 64 --repeats 1 --concurrency 1 --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0"
for c in 25 50; do
  timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $c% --output $OUT/q4km_offload$c.json > $OUT/q4km_offload$c.log 2>&1
  echo "== offload $c% rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km_offload$c.log | tail -1 | cut -c1-200
done
Q='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
timeout -s INT 60 python3 -m strata.cli.main quantize "$Q" /tmp/q4e.gguf --scheme q4_k_m --device cuda > $OUT/quantize_q4e.log 2>&1
echo quantize q4e rc=$? t=$(( $(date +%s)-S ))
timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4e_q8.json > $OUT/q4e_q8.log 2>&1
echo "== q4e rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_q8.log | tail -4 | cut -c1-200
