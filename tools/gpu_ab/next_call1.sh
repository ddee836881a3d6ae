# Prepared in session 31 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar). Untested on a GPU: the norm before an MoE layer done by the routing launch
# (norm_route_and_align, STRATA_NO_NORM_ROUTE=1 turns it off). 1. its kernel and block tests, the graph identity
# tests that run it; 2. its A/B in one process on the 30B-A3B Q4_K_M file and Qwen3-Next 8L bf16; 3. issue 28's and
# issue 23's commands.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py \
  tests/runner/test_cuda_graphs.py --tb=short -k "norm_route or decoder_layer_norm or route_and_align or moe_block_fused or graph_on_off_token_identity" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 90 python3 env_ab.py /tmp/q4km.gguf NO_NORM_ROUTE 3 > $OUT/norm_route_ab_30b.txt 2>&1
echo "== ab 30b rc=$? t=$(( $(date +%s)-S ))"; grep "tok/s" $OUT/norm_route_ab_30b.txt
timeout -s INT 90 python3 env_ab.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' NO_NORM_ROUTE 3 > $OUT/norm_route_ab_next.txt 2>&1
echo "== ab next rc=$? t=$(( $(date +%s)-S ))"; grep "tok/s" $OUT/norm_route_ab_next.txt
LEFT=$(( 570 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1
echo "== issue 28 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/next80_8l.log | tail -3 | cut -c1-160
