# Session 48's first call: next_call18 (the GPU tests fixed in session 47, the offload timeline with the native host
# part at 16 / 15 threads), then issue 23's offload at 25 % and 50 % static with the native host part against the
# Python one (env_ab.py PY_HOST_PART, graphs recaptured per arm, alternated) on this machine's host.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
bash tools/gpu_ab/next_call18.sh
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s KILL 150 python3 env_ab.py /tmp/q4km.gguf PY_HOST_PART 2 expert_cache=25% cpu_threads=16 \
  expert_swap_interval=0 > $OUT/py_host_part_ab25.txt 2>&1
echo "== PY_HOST_PART A/B 25% rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/py_host_part_ab25.txt
timeout -s KILL 120 python3 env_ab.py /tmp/q4km.gguf PY_HOST_PART 2 expert_cache=50% cpu_threads=16 \
  expert_swap_interval=0 > $OUT/py_host_part_ab50.txt 2>&1
echo "== PY_HOST_PART A/B 50% rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/py_host_part_ab50.txt
