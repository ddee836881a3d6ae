# Session 34, call 3: verification steps planned ahead (c9c6633) on the GPU: their graph tests and the async ones;
# the i-quants' Triton kernels' GPU tests; issue 28's and issue 29's speculation (synthetic L = 3, k = 3) against
# none with the steps planned ahead; the i-quants' GEMVs.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/spec/test_verify_ahead.py \
  tests/engine/test_async_scheduling.py tests/runner/test_cuda_graphs.py --tb=short > $OUT/tests_ahead.log 2>&1
echo "== ahead tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests_ahead.log | head -12 | cut -c1-200
timeout -s INT 150 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,2,4,8 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/next80_spec.json > $OUT/next80_spec.log 2>&1
echo "== issue 28 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/next80_spec.log | tail -8 | cut -c1-200
timeout -s INT 120 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,4 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/q4e_spec.json > $OUT/q4e_spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/q4e_spec.log | tail -4 | cut -c1-200
timeout -s INT 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_gemv.py \
  tests/kernels/test_packed_moe.py --tb=short \
  -k "-16- or -17- or -18- or -19- or -21- or -22- or -29- or 16] or 17] or 18] or 19] or 21] or 22] or 29]" \
  > $OUT/tests_iq.log 2>&1
echo "== iq tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests_iq.log | head -12 | cut -c1-200
LEFT=$(( 560 - ($(date +%s)-S) ))
LOWBIT_TYPES=IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S,IQ1_S,IQ1_M,Q4_K timeout -s INT $LEFT python3 lowbit_ab.py 1 2 > $OUT/lowbit_iq.txt 2>&1
echo "== lowbit iq rc=$? t=$(( $(date +%s)-S ))"; grep q_proj $OUT/lowbit_iq.txt | cut -c1-200
