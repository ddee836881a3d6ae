# Prepared in session 37 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar; .whl holds the wheels its README lists). 1. packed_moe's GPU tests (the word-decoded
# grouped tiles' first GPU run); 2. the grouped kernels' tilings x word tiles at prompt sizes (GROUPED_ARMS=sweep;
# session 37 found their cubins spilling up to ~1 KB a thread); 3. issue 23's Q4_K_M prefill with STRATA_GROUPED_WORDS
# 0 / 1 alternated; 4. the graphs on / off token-identity tests, now with fixed draft lengths.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_moe.py > $OUT/packed_moe_tests.log 2>&1
echo "== packed_moe tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/packed_moe_tests.log | cut -c1-200
GROUPED_ARMS=sweep PROMPT_TOKENS=128,256,512 timeout -s INT 200 python3 prompt_moe_ab.py > $OUT/grouped_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep tokens $OUT/grouped_sweep.txt | cut -c1-400
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m \
  --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in a b; do for W in 0 1; do
  STRATA_GROUPED_WORDS=$W timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 16 --concurrency 1 --repeats 1 --prefill-lens 128,512 \
    > /tmp/pf.log 2>&1
  echo "== words $W $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/prefill_words.log; cat /tmp/pf.log >> $OUT/prefill_words.log
  grep prefill /tmp/pf.log | cut -c1-120
done; done
LEFT=$(( 575 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py \
  -k "token_identity or keep_tokens or past_the_qsa" --tb=short > $OUT/graph_tests.log 2>&1
echo "== graph tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/graph_tests.log | head -8 | cut -c1-200
