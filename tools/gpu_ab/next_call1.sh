# Prepared in session 28 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh
# says how to build .base/src.tar; also `git archive 330af56 -o .base/base.tar` and
# `git archive 472f0b3 -o .base/mid.tar` for the A/B in 3):
# 1. issue 28's c8: the host side of the bench's closed loop (its decode steps spent 1.05 ms of host time at 8
#    streams in session 28, LLM.generate's 0.47): bench_prof.py, step split and cProfile;
# 2. packed experts at prompt sizes: where the 8-bit pairs stop beating the grouped kernels (Qwen4-Exp Q4_K_M's
#    TTFT is 16 ms against bf16's 8; issue 23's 512-token prefill); prompt_moe_ab.py;
# 3. Qwen4-Exp Q4_K_M step anatomy at 330af56 (LM head graph only), 472f0b3 (+ topk_sum_inject) and HEAD (+ Q5_K
#    rows on 8-bit activations), each arm run from its own folder (python puts the script's folder first on
#    sys.path);
# 4. GPU tests: packed_q8 with Q5_K (new in session 28), the graph identity test session 28 did not finish
#    (Qwen3-Next + MTP with the LM head graphs).
B=$PWD; source tools/gpu_ab/device_setup.sh
mkdir -p /tmp/base /tmp/mid /tmp/arm_base /tmp/arm_mid /tmp/arm_new && tar -xf $B/.base/base.tar -C /tmp/base \
  && tar -xf $B/.base/mid.tar -C /tmp/mid
S=$(date +%s)
timeout -s INT 120 python3 bench_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 8 > $OUT/bench_prof_next_c8.txt 2>&1
echo "== bench_prof rc=$? t=$(( $(date +%s)-S ))"; grep "=====" $OUT/bench_prof_next_c8.txt | cut -c1-300
timeout -s INT 170 python3 prompt_moe_ab.py > $OUT/prompt_moe_ab.txt 2>&1
echo "== prompt_moe_ab rc=$? t=$(( $(date +%s)-S ))"; grep "tokens" $OUT/prompt_moe_ab.txt | cut -c1-220
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
for arm in base mid new; do cp step_anatomy.py /tmp/arm_$arm/; done
for arm in base mid new; do
  case $arm in base) P=/tmp/base;; mid) P=/tmp/mid;; *) P=/tmp/src;; esac
  echo "== $arm"; (cd /tmp/arm_$arm && PYTHONPATH=$P:/tmp/site:/tmp/hf timeout -s INT 70 python3 step_anatomy.py /tmp/q4e.gguf - 2>&1 | grep -E "^(engine|graph|host)")
done
echo "== t=$(( $(date +%s)-S ))"
LEFT=$(( 570 - ($(date +%s)-S) ))
[ $LEFT -gt 40 ] && timeout -s INT $LEFT python3 -m pytest -v -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py \
  tests/runner/test_cuda_graphs.py --tb=short -k "Q5_K or 13 or graph_on_off_token_identity and spec5" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | cut -c1-200
