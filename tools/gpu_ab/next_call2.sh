# Prepared in session 37 for the next session's second device call (after next_call1.sh has said whether the
# grouped word tiles win): where a Q4_K_M decode step's launches go now (session 28's profile predates the
# attention epilogue and the norms' rounding), and issue 23's command with STRATA_GROUPED_WORDS unset and 1.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m \
  --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 prof_q4km.py /tmp/q4km.gguf 1 8 > $OUT/prof_q4km.txt 2>&1; echo "== prof rc=$? t=$(( $(date +%s)-S ))"
grep -E "=====|kernels and copies" $OUT/prof_q4km.txt | cut -c1-160
for W in 0 1; do
  STRATA_GROUPED_WORDS=$W timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 \
    --prefill-lens 512 --output $OUT/q4km_words$W.json > $OUT/q4km_words$W.log 2>&1
  echo "== issue 23 words=$W rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km_words$W.log | tail -4 | cut -c1-160
done
