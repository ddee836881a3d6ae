# Prepared in session 41 for a third call (CPU expert speed and a possible third expert tier for issue 23; issue 28):
# (1) prefetch_ab.sh: the packed CPU kernel's row prefetch distance and hint at 16 threads; (2) zero_copy_ab.py: one
# token's pairs read by the GPU kernel straight from pinned host memory against copied in first (the staging path).
# Build the archive first: git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 120 python3 zero_copy_ab.py pairs=1,3,6 > $OUT/zero_copy.txt 2>&1
echo "== zero copy rc=$? t=$(( $(date +%s)-S ))"; grep -E "pairs|Error" $OUT/zero_copy.txt | cut -c1-300
timeout -s INT 400 bash tools/gpu_ab/prefetch_ab.sh > $OUT/prefetch_ab.txt 2>&1
echo "== prefetch rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/prefetch_ab.txt | cut -c1-400
# (3) issue 28's speculation at 4 streams through the bench's own loop: where prompt-carrying steps' time goes (session
# 37: ~9.3 ms a step against 7.08 ms of kernels for a 64-token prompt)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 200 python3 bench_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 4 "spec=$SPEC" prompts=32 \
  input=64 output=128 > $OUT/bench_prof_spec_c4.txt 2>&1
echo "== bench_prof spec c4 rc=$? t=$(( $(date +%s)-S ))"; grep -E "=====" $OUT/bench_prof_spec_c4.txt | cut -c1-400
