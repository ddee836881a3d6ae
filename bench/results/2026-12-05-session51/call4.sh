# For a later call of the next session (prepared in session 50, ~6 minutes): the paged attention's fused merge
# (STRATA_FUSED_MERGE=1: the last split of each (sequence, KV head) merges, no merge launch; ~3 us a layer on the
# critical path in session 39's one-stream trace). Its GPU tests, the attention tests with it on, then issue 23's
# c1 / c8 with it off and on, two alternated rounds. If it pays, make it the default (paged_attention.merge_counters).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 150 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py -k "fused_merge or paged_attention" \
  -p no:cacheprovider > $OUT/tests_off.log 2>&1; echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_off.log
STRATA_FUSED_MERGE=1 timeout -s INT 100 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py -k "paged_attention" \
  -p no:cacheprovider > $OUT/tests_on.log 2>&1; echo "== tests fused rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_on.log
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2; do for F in 0 1; do
  STRATA_FUSED_MERGE=$F timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 > /tmp/b.log 2>&1
  echo "== fused_merge=$F round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt; grep -E "strata_c" /tmp/b.log >> $OUT/ab.txt
done; done
cat $OUT/ab.txt | cut -c1-120
