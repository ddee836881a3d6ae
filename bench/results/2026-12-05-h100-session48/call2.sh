# Session 48, issue 23's offload (30B-A3B 24L Q4_K_M, 25 % static, zero copy auto, 16 threads): (1) where a token's
# time goes with the native host part (offload_timeline.py), (2) STRATA_SM_EXCHANGE=1: the split graphs' exchange
# by kernels (the four copies out now one kernel, sm_copy.export_rows) against copy nodes, (3) the native host part
# against the Python one on this machine's host (session 47 measured it on an H100's). env_ab.py: one process,
# graphs recaptured per arm, arms alternated, greedy tokens compared; then the offload GPU tests.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s INT 70 python3 offload_timeline.py /tmp/q4km.gguf cache=25% zc=auto arms=16:5000,15:5000 \
  > $OUT/timeline_static25.txt 2>&1
echo "== timeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline_static25.txt | cut -c1-500
for NAME in SM_EXCHANGE PY_HOST_PART; do  # 2 rounds each
  timeout -s KILL 120 python3 env_ab.py /tmp/q4km.gguf $NAME 2 expert_cache=25% cpu_threads=16 \
    expert_swap_interval=0 > $OUT/ab25_$NAME.txt 2>&1
  echo "== $NAME A/B 25% rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/ab25_$NAME.txt
done
timeout -s INT 120 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py -k "exchange or ring or sms or native" \
  tests/kernels/test_sm_gather.py > $OUT/tests_offload_gpu.log 2>&1
echo "== offload GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_offload_gpu.log | tail -6
