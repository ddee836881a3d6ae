# Session 48: paged attention with splits of several KV tiles (STRATA_ATTN_MIN_TILES; a short context then runs as
# one split that writes its output, its merge programs returning at once). (1) the kernel's GPU tests, (2) one-stream
# decode A/B in one process (env_ab.py: graphs recaptured per arm, alternated, greedy tokens compared) on issue 23's
# Q4_K_M 30B-A3B 24L (64-320 tokens of context: 1-5 tiles of 64) at 4 and 8 tiles, and on issue 28's Qwen3-Next 8L
# bf16 (tiles of 32) at 4 and 8, (3) the two GPU tests fixed in session 47 (prompt logprobs from prompt graphs, SM
# staging with four prompts).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernels.py -k paged_attention \
  > $OUT/tests_paged_attention.log 2>&1
echo "== paged attention GPU tests rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/tests_paged_attention.log
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for tiles in 4 8; do
  timeout -s KILL 80 python3 env_ab.py /tmp/q4km.gguf ATTN_MIN_TILES=$tiles 3 > $OUT/attn_tiles${tiles}_q4km.txt 2>&1
  echo "== 30B Q4_K_M ATTN_MIN_TILES=$tiles rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/attn_tiles${tiles}_q4km.txt
done
for tiles in 4 8; do
  timeout -s KILL 100 python3 env_ab.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' ATTN_MIN_TILES=$tiles 3 \
    > $OUT/attn_tiles${tiles}_next.txt 2>&1
  echo "== Qwen3-Next 8L ATTN_MIN_TILES=$tiles rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/attn_tiles${tiles}_next.txt
done
timeout -s INT 70 python3 -m pytest -q -p no:cacheprovider tests/engine/test_prompt_logprobs.py -m gpu \
  > $OUT/tests_prompt_logprobs.log 2>&1
echo "== prompt logprobs GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_prompt_logprobs.log | tail -4
timeout -s INT 70 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py -k sms \
  > $OUT/tests_sm_stage.log 2>&1
echo "== SM staging GPU test rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_sm_stage.log | tail -4
# where issue 23's c1 time to first token goes (16.7 ms for a 64-token prompt in session 39: ~9 % of the c1 run)
PROF_LEN=64 timeout -s INT 90 python3 prompt_step_prof.py /tmp/q4km.gguf > $OUT/prompt_prof_q4km.txt 2>&1
echo "== prompt step profile rc=$? t=$(( $(date +%s)-S ))"; grep -E "prompt|Error" $OUT/prompt_prof_q4km.txt | head -5
head -30 $OUT/prompt_prof_q4km.txt | tail -22 | cut -c1-150
