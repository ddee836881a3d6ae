# Session 28 call 3: the LM head graph and topk_sum_inject (HEAD) against 91381a7, one-stream step anatomy alternated in one
# machine start; GPU tests of graphs; host profile of Qwen4-Exp's plain decode at 330af56.
B=$PWD; source tools/gpu_ab/device_setup.sh; mkdir -p /tmp/base && tar -xf $B/.base/base.tar -C /tmp/base
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
for arm in base new; do
  [ $arm = base ] && P=/tmp/base:/tmp/site:/tmp/hf || P=/tmp/src:/tmp/site:/tmp/hf
  echo "== $arm Qwen4-Exp Q4_K_M"; PYTHONPATH=$P timeout -s INT 80 python3 step_anatomy.py /tmp/q4e.gguf - 2>&1 | grep -E "^(engine|graph|host)"
done
echo "== t=$(( $(date +%s)-S ))"
for arm in base new; do
  [ $arm = base ] && P=/tmp/base:/tmp/site:/tmp/hf || P=/tmp/src:/tmp/site:/tmp/hf
  echo "== $arm qwen3-next 8L bf16"; PYTHONPATH=$P timeout -s INT 80 python3 step_anatomy.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' - 2>&1 | grep -E "^(engine|graph|host)"
done
echo "== t=$(( $(date +%s)-S ))"
timeout -s INT 170 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py tests/kernels/test_fused_ops.py \
  --tb=short -k "graph_on_off_token_identity or qwen4_exp_graphs or greedy_matches_hf_through or topk_sum_inject" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | cut -c1-200
LEFT=$(( 560 - ($(date +%s)-S) ))
[ $LEFT -gt 40 ] && timeout -s INT $LEFT python3 host_prof.py /tmp/q4e.gguf plain > $OUT/host_prof_q4e.txt 2>&1
echo "== host_prof rc=$? t=$(( $(date +%s)-S ))"; grep "=====" $OUT/host_prof_q4e.txt
