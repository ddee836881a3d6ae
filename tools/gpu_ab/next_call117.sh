# Prepared in session 74 (~8 minutes; run under a 600 s limit), on whatever card comes. Issue 23's model at Q4_K_M:
# c1 / c8 / c16 and 512-token prefill (H200 targets 740 / 2,200 / 2,200 / 18,000; session 66: 730.2 / 2,181.2 /
# 2,901.0 / 20,615.1), where a 64-token prompt's time goes (prompt_step_prof.py: a 1-token generate at 64 / 512 tokens,
# a profiled 64-token prompt's kernels; at c1 the prompt step is ~11 of a request's ~175 ms), the offload command at
# 25 % (150; 144.7), and the offload GPU tests (session 73 fixed one case without a GPU run).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
quantize_q4km
issue23 150
PROMPT_LENS=64,512 PROF_LEN=64 timeout -s INT 90 python3 prompt_step_prof.py /tmp/q4km.gguf > $OUT/prof.log 2>&1
echo "== prof rc=$? t=$(( $(date +%s)-S ))"; grep -v "^\s*$" $OUT/prof.log | grep -E "ms a|us " | head -30 | cut -c1-150
[ $(left 420) -gt 70 ] && offload25 off25 80
[ $(left 570) -gt 60 ] && run_tests offload_gpu $(left 570) tests/experts/test_expert_offload_gpu.py
exit 0
