# Prepared in session 47 after its H100 calls: (1) the two GPU tests fixed then (prompt logprobs from prompt graphs in
# bfloat16 against the same engine without graphs; SM staging with four prompts), (2) where an offloaded token's time
# goes with the native host part (offload_timeline.py at 25 %, static split, zero copy auto, 16 and 15 threads).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 70 python3 -m pytest -q -p no:cacheprovider tests/engine/test_prompt_logprobs.py -m gpu \
  > $OUT/tests_prompt_logprobs.log 2>&1
echo "== prompt logprobs GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_prompt_logprobs.log | tail -4
timeout -s INT 70 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py -k sms \
  > $OUT/tests_sm_stage.log 2>&1
echo "== SM staging GPU test rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_sm_stage.log | tail -4
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s INT 110 python3 offload_timeline.py /tmp/q4km.gguf cache=25% zc=auto arms=16:5000,15:5000 \
  > $OUT/timeline_static25.txt 2>&1
echo "== timeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline_static25.txt | cut -c1-700
