# Prepared in session 30 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says
# how to build .base/src.tar). Then next_call2.sh (issue 26), next_call3.sh (issue 23 / 29 packed).
# 1. GPU tests of session 30's changes not yet run on a GPU: QSA's block scores reading the host KV tier's
#    index keys (kernel test; the graph identity test's host_kv case), prompt chunks past the budget choosing in
#    one top-k on CUDA (float32 greedy = HF through the Triton paths), the sparse variant in the warm-up ladder;
# 2. issue 29's Q4_K_M command (the packed LM head's 2-8 row tiling: 635 -> 399 us at 4 rows) and its bf16
#    speculation command (the spec arms now print the byte model's bound);
# 3. Qwen4-Exp decoding one stream at 8K and 32K contexts (QSA past its budget on the device).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 200 python3 -m pytest -v -m gpu -p no:cacheprovider tests/kernels/test_qsa_scores.py \
  tests/runner/test_cuda_graphs.py --tb=short -k "qsa or qwen4_exp or host_tier or greedy_matches_hf_through" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed" $OUT/tests.log | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== issue 29 Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4e.log | tail -3 | cut -c1-160
timeout -s INT 80 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' \
  --device cuda --concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 \
  --max-model-len 40000 --repeats 1 --decode-contexts 8192,32768 --output $OUT/q4e_long.json > $OUT/q4e_long.log 2>&1
echo "== long rc=$? t=$(( $(date +%s)-S ))"; grep -iE "decode_at|tok/s" $OUT/q4e_long.log | tail -3 | cut -c1-200
LEFT=$(( 580 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' \
  --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 1 \
  --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline \
  --output $OUT/q4e_spec.json > $OUT/q4e_spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_" $OUT/q4e_spec.log | tail -2 | cut -c1-220
