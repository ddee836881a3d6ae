# Session 32, call 2 (carry [".whl", ".base"]): the GPU tests of the attention output epilogue (its reference's
# roundings now the kernel's), the routing without the row layout and the graph identity / HF tests; then issue 28's
# and issue 23's commands after the norm in the routing launch was removed.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py tests/kernels/test_kernels.py \
  tests/runner/test_cuda_graphs.py --tb=short -k "without_layout or route_and_align or moe_block_fused or gates_and_rounds or graph_on_off_token_identity or greedy_matches_hf_through or qwen4_exp_graphs" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
timeout -s INT 150 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1
echo "== issue 28 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/next80_8l.log | tail -5 | cut -c1-200
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
LEFT=$(( 560 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 30B Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-200
