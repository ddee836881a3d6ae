# Prepared in session 47 (the device came late and seldom): issue 23's offload in one call, the parts of next_call12
# and next_call15 that bear on it. (1) offload_timeline.py at 25 % (static split, zero copy auto) with 16, 15 and 14
# pool threads: where a token's 13.1 ms go (host parts: wait, CPU experts, the rest; the time between them), and
# whether a pool that leaves a core to the thread feeding the GPU is faster (the host part's "rest" took ~72 us a
# layer on the H200 host against 19 on the 2-core VM). (2) zero_copy_ab.py's SM staging arms (can kernels copy the
# offloaded experts from pinned memory faster than the pairs kernel reads them in place?) and their GPU tests.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s INT 170 python3 offload_timeline.py /tmp/q4km.gguf cache=25% zc=auto arms=16:5000,15:5000,14:5000 \
  > $OUT/timeline_static25.txt 2>&1
echo "== timeline rc=$? t=$(( $(date +%s)-S ))"; grep -v "^\s" $OUT/timeline_static25.txt | grep -E "threads|Error" | cut -c1-700
timeout -s INT 150 python3 zero_copy_ab.py pairs=3,6,8 > $OUT/zero_copy_sm_stage.txt 2>&1
echo "== zero copy A/B rc=$? t=$(( $(date +%s)-S ))"; cut -c1-600 $OUT/zero_copy_sm_stage.txt
timeout -s INT 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_sm_gather.py > $OUT/tests_sm_gather.log 2>&1
echo "== gather test rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_sm_gather.log
timeout -s INT 90 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py -k "sms or in_place" \
  > $OUT/tests_sm_stage.log 2>&1
echo "== SM staging GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_sm_stage.log | tail -4
