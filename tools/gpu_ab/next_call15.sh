# Prepared in session 46 (no device lent): can the SMs stage offloaded experts faster than they read them in place?
# zero_copy_ab.py's new arms copy one token's experts from pinned host memory into device slots with
# kernels/sm_copy.gather_rows (a kernel reading the device's list of experts: no host work, graph-capturable), alone
# and then run by the pairs kernel, beside session 42's arms (in place 22-27 GB/s; copy engine 43-47 GB/s). If
# "sm stage + run" beats "zero copy" clearly, STRATA_SM_STAGE=1 (slots.stage_by_sm) should become the default: its GPU
# tests and the issue-23 offload A/B (25 %, zero copy auto) follow.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sm_gather.py > $OUT/tests_sm_gather.log 2>&1
echo "== gather test rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_sm_gather.log
timeout -s INT 150 python3 zero_copy_ab.py pairs=3,6,8 > $OUT/zero_copy_sm_stage.txt 2>&1
echo "== zero copy A/B rc=$? t=$(( $(date +%s)-S ))"; cut -c1-600 $OUT/zero_copy_sm_stage.txt
timeout -s INT 90 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py -k "sms or in_place" \
  > $OUT/tests_sm_stage.log 2>&1
echo "== SM staging GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_sm_stage.log | tail -4
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s KILL 200 python3 env_ab.py /tmp/q4km.gguf SM_STAGE 2 expert_cache=25% cpu_threads=16 \
  expert_swap_interval=0 > $OUT/sm_stage_ab.txt 2>&1
echo "== SM_STAGE A/B rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/sm_stage_ab.txt
