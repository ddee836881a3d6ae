# Prepared in session 27 for the next session's first device call (carry [".whl", ".base"] after building the
# archive, device_setup.sh says how):
# 1. the staged-graph tests that session 27's call 2 stopped at a stale assertion (the ring's copies now queued
#    after the step's uploads: llama, Qwen3-Next, Qwen3-Next + MTP);
# 2. kernel profiles of one-stream decode (CUPTI inside graph replays) for issue 23's 30B Q4_K_M and issue 29's
#    Qwen4-Exp Q4_K_M: the launches a step and where the time goes, for the one-stream targets;
# 3. issue 26: do the CPU experts' host reads and the staging ring's copies share host memory bandwidth?
# 4. issue 28's bench command (where its targets stand after sessions 18-21).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 100 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py --tb=short \
  -k "staged_host_kv" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | cut -c1-200
timeout -s INT 30 python3 host_bw_contention.py 15 2>&1 | tee $OUT/host_bw_contention.txt
timeout -s INT 70 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
echo "== quantized 30B rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 90 python3 prof_q4km.py /tmp/q4km.gguf 1 > $OUT/prof_30b_q4km.txt 2>&1
echo "== prof 30B rc=$? t=$(( $(date +%s)-S ))"; grep -E "=====|a step" $OUT/prof_30b_q4km.txt
timeout -s INT 90 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
echo "== quantized Qwen4-Exp rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 90 python3 prof_q4km.py /tmp/q4e.gguf 1 > $OUT/prof_q4e_q4km.txt 2>&1
echo "== prof Qwen4-Exp rc=$? t=$(( $(date +%s)-S ))"; grep -E "=====|a step" $OUT/prof_q4e_q4km.txt
LEFT=$(( 570 - ($(date +%s)-S) ))
[ $LEFT -gt 90 ] && timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1
echo "== issue 28 bench rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|prefill" $OUT/next80_8l.log | tail -5 | cut -c1-160
