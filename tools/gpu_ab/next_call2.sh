# Prepared in session 28: the next session's second device call (after next_call1.sh).
# 1. issue 28's c8: the host side of the bench's closed loop (its decode steps spent 1.05 ms of host time at 8
#    streams in session 28, LLM.generate's 0.47): bench_prof.py, step split and cProfile;
# 2. packed experts at prompt sizes: where the 8-bit pairs stop beating the grouped kernels (Qwen4-Exp Q4_K_M's
#    TTFT is 16 ms against bf16's 8; issue 23's 512-token prefill): prompt_moe_ab.py;
# 3. issue 28's bench command and issue 29's at Q4_K_M at HEAD (its TTFT: the 8-bit pairs' per-expert bound).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 120 python3 bench_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 8 > $OUT/bench_prof_next_c8.txt 2>&1
echo "== bench_prof rc=$? t=$(( $(date +%s)-S ))"; grep "=====" $OUT/bench_prof_next_c8.txt | cut -c1-300
timeout -s INT 150 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1
echo "== issue 28 bench rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/next80_8l.log | tail -3 | cut -c1-160
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 110 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== issue 29 Q4_K_M bench rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4e.log | tail -3 | cut -c1-160
LEFT=$(( 575 - ($(date +%s)-S) ))
[ $LEFT -gt 60 ] && timeout -s INT $LEFT python3 prompt_moe_ab.py > $OUT/prompt_moe_ab.txt 2>&1
echo "== prompt_moe_ab rc=$? t=$(( $(date +%s)-S ))"; grep "tokens" $OUT/prompt_moe_ab.txt | cut -c1-220
