# Prepared in session 47 (the device came late and seldom): issue 23's offload in one call. (1) env_ab.py
# PY_HOST_PART: the offloaded layers' host part as one native call (experts/native_host_part.py, the default since
# session 47) against the Python one it replaced (STRATA_PY_HOST_PART=1), 25 % static split, zero copy auto, 16
# threads, graphs recaptured per arm, arms alternated twice, greedy tokens compared. (2) the same A/B of
# STRATA_LAUNCH_AHEAD=1 (session 45's gated splits: the graph after a host part launched before it), on top of the
# native host part. (3) every offload GPU test (split graphs against the eager path: the native host part inside
# graphs, the gated splits). offload_timeline.py (where a token's ~13 ms go) waits for a later call.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s KILL 200 python3 env_ab.py /tmp/q4km.gguf PY_HOST_PART 2 expert_cache=25% cpu_threads=16 \
  expert_swap_interval=0 > $OUT/py_host_part_ab.txt 2>&1
echo "== PY_HOST_PART A/B rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/py_host_part_ab.txt
timeout -s KILL 140 python3 env_ab.py /tmp/q4km.gguf LAUNCH_AHEAD 2 expert_cache=25% cpu_threads=16 \
  expert_swap_interval=0 > $OUT/launch_ahead_ab.txt 2>&1
echo "== LAUNCH_AHEAD A/B rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/launch_ahead_ab.txt
timeout -s INT 130 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py \
  > $OUT/tests_offload_gpu.log 2>&1
echo "== offload GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_offload_gpu.log | tail -6
