# Prepared in session 41 for a third call (the CPU experts' speed for issue 23; issue 28's prompt-carrying steps):
# (1) prefetch_ab.sh: the packed CPU kernel's row prefetch distance and hint at 16 threads.
# Build the archive first: git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 330 bash tools/gpu_ab/prefetch_ab.sh 4:3 8:3 16:3 8:2 > $OUT/prefetch_ab.txt 2>&1
echo "== prefetch rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/prefetch_ab.txt | cut -c1-400
# (2) issue 28's speculation at 4 streams through the bench's own loop: where prompt-carrying steps' time goes (session
# 37: ~9.3 ms a step against 7.08 ms of kernels for a 64-token prompt)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 200 python3 bench_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 4 "spec=$SPEC" prompts=32 \
  input=64 output=128 > $OUT/bench_prof_spec_c4.txt 2>&1
echo "== bench_prof spec c4 rc=$? t=$(( $(date +%s)-S ))"; grep -E "=====" $OUT/bench_prof_spec_c4.txt | cut -c1-400
