# Prepared in session 28 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh
# says how to build .base/src.tar; also `git archive 330af56 -o .base/base.tar` and
# `git archive 472f0b3 -o .base/mid.tar` for the A/B in 2). Then next_call2.sh.
# 1. GPU tests of session 28's changes not yet run on a GPU: packed_q8's Q5_K rows, Qwen4-Exp graphs with a
#    host PLE table, no host sync inside a planned-ahead decode launch (index tensors through pinned memory),
#    the graph identity tests (LM head graphs of decode and verify layouts), the 8-bit pairs' bound, the shared
#    expert's gate folded into the top-k sums (kernels and the hybrid models against HF);
# 2. Qwen4-Exp Q4_K_M step anatomy at 330af56 (LM head graph only), 472f0b3 (+ topk_sum_inject) and HEAD (+ Q5_K
#    on 8-bit activations, no host syncs in decode launches), each arm run from its own folder (python puts
#    the script's folder first on sys.path).
B=$PWD; source tools/gpu_ab/device_setup.sh
mkdir -p /tmp/base /tmp/mid /tmp/arm_base /tmp/arm_mid /tmp/arm_new && tar -xf $B/.base/base.tar -C /tmp/base \
  && tar -xf $B/.base/mid.tar -C /tmp/mid
S=$(date +%s)
timeout -s INT 330 python3 -m pytest -v -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py \
  tests/kernels/test_packed_moe.py tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py \
  tests/engine/test_async_scheduling.py --tb=short -k "Q5_K or 13 or host_ple_table or never_waits or \
  graph_on_off_token_identity or qwen4_exp_graphs or beside_verification or few_pairs_an_expert or topk_sum or \
  greedy_matches_hf_through or folded_topk_sum" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
for arm in base mid new; do cp step_anatomy.py /tmp/arm_$arm/; done
for arm in base mid new; do
  case $arm in base) P=/tmp/base;; mid) P=/tmp/mid;; *) P=/tmp/src;; esac
  echo "== $arm"; (cd /tmp/arm_$arm && PYTHONPATH=$P:/tmp/site:/tmp/hf timeout -s INT 70 python3 step_anatomy.py /tmp/q4e.gguf - 2>&1 | grep -E "^(engine|graph|host)")
done
echo "== t=$(( $(date +%s)-S ))"
