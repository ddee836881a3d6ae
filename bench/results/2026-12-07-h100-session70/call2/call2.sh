# Prepared in session 69 (~8 minutes, an H200 if one comes): the GPU test of chunked prompts on a packed model (its
# LM head took no empty batch before 0a2522f; docs/benchmarks.md, session 69), then decode attention at two
# programs a multiprocessor (HEAD) against eight (prev: HEAD set back to eight, built as below) at 8 streams after
# 3,900-token prompts of issue 23's 30B-A3B 24L Q4_K_M (session 69's call 5 died on the chunked-prompt bug in both
# trees, so prev must carry the fix: build it as HEAD with paged_attention.num_splits_for's programs_per_sm set back to 8),
# then on an H200 issue 23's c1 / c8 / c16 and the offload command at 25 %.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT; then the prev tree:  rm -rf /tmp/p && mkdir /tmp/p && git archive HEAD | tar -x -C /tmp/p && sed -i \
#   's/programs_per_sm: int = 2/programs_per_sm: int = 8/' /tmp/p/strata/kernels/paged_attention.py && \
#   tar -czf .base/prev.tar -C /tmp/p .
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
grep -q "programs_per_sm: int = 8" /tmp/prev/strata/kernels/paged_attention.py || echo "!! prev is not the 8-program tree"
run_tests chunks 60 tests/weights/test_packed_gguf.py -k "chunks or cuda"
quantize_q4km
for R in 1 2; do for T in src prev; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 75 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 8 --input-len 3900 --output-len 128 \
    --concurrency 8 --repeats 1 --warmup-output-len 0 --output $OUT/long_${T}_r$R.json > $OUT/long_${T}_r$R.log 2>&1)
  echo "== $T round $R 3.9K c8 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|Error" $OUT/long_${T}_r$R.log | cut -c1-170
done; done
if nvidia-smi -L | grep -q H200; then
  timeout -s INT 120 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/q4km.json \
    > $OUT/q4km.log 2>&1; echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4km.log | cut -c1-170
  [ $(( $(date +%s)-S )) -lt 500 ] && timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
    --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% --output $OUT/off25.json > $OUT/off25.log 2>&1
  echo "== offload 25% rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25.log | cut -c1-170
fi
