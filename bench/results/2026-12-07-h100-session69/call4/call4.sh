# Session 69 (any card, ~7 minutes): decode attention at two programs a multiprocessor (num_splits_for; was eight)
# against e1d4ab3's trees... (prev = HEAD before the change): the paged attention GPU tests, issue 23's command
# (30B-A3B 24L Q4_K_M, c1 / c8 / c16) from each tree, then the same model at 8 streams after 4,096-token prompts.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz HEAD~1 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
run_tests paged 70 tests/kernels -k "paged or attention"
quantize_q4km
cat /tmp/q4km.gguf > /dev/null
for T in src prev; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 1,8,16 --repeats 1 --output $OUT/q4km_$T.json > /tmp/q_$T.log 2>&1)
  echo "== $T issue 23 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/q_$T.log | cut -c1-170 | tee -a $OUT/ab.txt
done
for T in src prev; do
  [ $(( $(date +%s)-S )) -lt 480 ] && (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 80 python3 -m \
    strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 8192 --num-prompts 16 --input-len 4096 \
    --output-len 128 --concurrency 8 --repeats 1 --output $OUT/long_$T.json > /tmp/l_$T.log 2>&1)
  echo "== $T 4K c8 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/l_$T.log | cut -c1-170 | tee -a $OUT/ab.txt
done
