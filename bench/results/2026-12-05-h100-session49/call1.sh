# Session 49's first call (~9 minutes): quant_moe as one job (519b87a) against its four phases (666b8be) on the host's
# 16 threads, then the grouped pairs (GPU tests; issue 23's c1 / c8 with STRATA_GROUPED_PAIRS=1 against without), issue
# 23's offload at 25 % in both trees, and the grouped tiling sweep last.
# Build the archives first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#                            git archive 666b8be -o .base/old.tar
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/old && tar -xf $OLDPWD/.base/old.tar -C /tmp/old && cp tools/gpu_ab/qmoe_scale.py /tmp/old/
for R in 1 2; do for T in old src; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 90 python3 qmoe_scale.py threads=8,16 pairs=6,8 \
    >> $OUT/qmoe_$T.txt 2>&1); echo "== qmoe $T round $R rc=$? t=$(( $(date +%s)-S ))"
done; done
for T in old src; do echo "-- $T"; grep threads $OUT/qmoe_$T.txt; done
timeout -s INT 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py \
  tests/kernels/test_fused_ops.py -k grouped > $OUT/tests_grouped.log 2>&1
echo "== grouped GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_grouped.log | tail -5
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
for G in 0 1; do
  STRATA_GROUPED_PAIRS=$G timeout -s INT 55 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 \
    --output $OUT/c18_grouped$G.json > $OUT/c18_grouped$G.log 2>&1
  echo "== c1/c8 GROUPED_PAIRS=$G rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/c18_grouped$G.log | cut -c1-200
done
for T in src old; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 60 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
    --cpu-threads 16 --expert-swap-interval 0 --repeats 2 --expert-cache 25% --output $OUT/off25_$T.json \
    > $OUT/off25_$T.log 2>&1)
  echo "== offload 25% $T rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25_$T.log | cut -c1-160
done
TOKENS=8,64 timeout -s INT 90 python3 grouped_pairs_sweep.py > $OUT/grouped_pairs_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -v "^fail" $OUT/grouped_pairs_sweep.txt | cut -c1-220 | head -12
