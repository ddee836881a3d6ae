# For the next session (prepared in session 51, ~9 minutes; say which card). Session 51 measured the
# paged attention's fused merge (STRATA_FUSED_MERGE=1) at +1.7 % for issue 23's c8 and -0.8 % at c1 (an H100).
# (1) The engine-level GPU tests with it on (CUDA graphs against eager, speculative verification): the condition for
# making it the default for steps of 2+ sequences. (2) Issue 23's c1 / c8 / c16 with it off (0), on (1) and on for
# steps of two or more sequences (2, the candidate default), two alternated rounds, each run's JSON kept.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
STRATA_FUSED_MERGE=1 timeout -s INT 180 python3 -m pytest -q -m gpu tests/runner/test_cuda_graphs.py \
  tests/spec/test_verify.py -p no:cacheprovider > $OUT/tests_fused.log 2>&1
echo "== engine tests, fused merge rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/tests_fused.log | cut -c1-300
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2; do for F in 0 1 2; do
  STRATA_FUSED_MERGE=$F timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 \
    --output $OUT/fused${F}_r$R.json > /tmp/b.log 2>&1
  echo "== fused_merge=$F round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt; grep -E "strata_c" /tmp/b.log >> $OUT/ab.txt
done; done
cat $OUT/ab.txt | cut -c1-120
