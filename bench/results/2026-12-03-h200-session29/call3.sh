# Session 29, device call 3 (carry [".whl", ".base"]): the LM head's mixer rounding rows alike (the Qwen4-Exp MTP
# graph identity test that verify-layout head graphs broke), the gated MoE sums' kernel tests that call 2's time
# limit cut, the PLE-table graph test; then a tiling sweep of the Q6_K LM heads' one-row GEMV.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 200 python3 -m pytest -v -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py \
  --tb=short -k "topk_sum or rows_alike or hyper_mix or qwen4_exp_graphs or host_ple_table" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed" $OUT/tests.log | cut -c1-200
timeout -s INT 180 python3 head_sweep.py 1 > $OUT/head_sweep.txt 2>&1
echo "== head sweep rc=$? t=$(( $(date +%s)-S ))"; grep "==" $OUT/head_sweep.txt
