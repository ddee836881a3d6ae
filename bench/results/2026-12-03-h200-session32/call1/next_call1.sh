# Prepared in session 31 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar). Untested on a GPU: the norm before an MoE layer done by the routing launch
# (norm_route_and_align, STRATA_NO_NORM_ROUTE=1 turns it off) and the attention kernel's output epilogue (the
# gate and the 8-bit rounding for a packed o_proj, STRATA_NO_ATTENTION_EPILOGUE=1). 1. their kernel and block
# tests, the graph identity and HF tests that run them; 2. A/Bs in one process on the 30B-A3B Q4_K_M file and
# Qwen3-Next 8L bf16. Then next_call2.sh: the issues' commands.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py tests/kernels/test_kernels.py \
  tests/runner/test_cuda_graphs.py --tb=short -k "norm_route or decoder_layer_norm or route_and_align or moe_block_fused or gates_and_rounds or graph_on_off_token_identity or greedy_matches_hf_through or qwen4_exp_graphs" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
for V in NO_NORM_ROUTE NO_ATTENTION_EPILOGUE; do
  timeout -s INT 70 python3 env_ab.py /tmp/q4km.gguf $V 3 > $OUT/ab_30b_$V.txt 2>&1
  echo "== ab 30b $V rc=$? t=$(( $(date +%s)-S ))"; grep "tok/s" $OUT/ab_30b_$V.txt
  timeout -s INT 90 python3 env_ab.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' $V 3 > $OUT/ab_next_$V.txt 2>&1
  echo "== ab next $V rc=$? t=$(( $(date +%s)-S ))"; grep "tok/s" $OUT/ab_next_$V.txt
done
