# For the next session's first call (prepared in session 48; ~8 minutes): the grouped pairs (GPU tests, the tiling
# sweep at 8 / 64 tokens of the 30B-A3B's experts, issue 23's c1 / c8 with STRATA_GROUPED_PAIRS=1 against without),
# then issue 23's offload at 25 % with the exchange by kernels (the default since session 48). next_call22.sh (every
# offload GPU test, the prompt-logprobs test) and next_call23.sh (the full sweep, Qwen4-Exp's shape) follow.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py \
  tests/kernels/test_fused_ops.py -k grouped > $OUT/tests_grouped.log 2>&1
echo "== grouped GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_grouped.log | tail -5
TOKENS=8,64 timeout -s INT 120 python3 grouped_pairs_sweep.py > $OUT/grouped_pairs_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -v "^fail" $OUT/grouped_pairs_sweep.txt | cut -c1-220 | head -12
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
for G in 0 1; do
  STRATA_GROUPED_PAIRS=$G timeout -s INT 55 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 \
    --output $OUT/c18_grouped$G.json > $OUT/c18_grouped$G.log 2>&1
  echo "== c1/c8 GROUPED_PAIRS=$G rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/c18_grouped$G.log | cut -c1-200
done
timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
  --repeats 2 --expert-cache 25% --output $OUT/off25.json > $OUT/off25.log 2>&1
echo "== offload 25% rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25.log | cut -c1-160
