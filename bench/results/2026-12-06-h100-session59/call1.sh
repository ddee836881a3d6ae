# Session 58 (~8 minutes): the landed rule as a whole (a prompt's step leaves the 8-bit pairs past 2 pairs an expert,
# windows and decode rows past 4; session 58 measured each half with STRATA_Q8_PAIRS_PER_EXPERT on every step) against
# the commit before it (.base/prev.tar): issue 23's c1 with 32- and 64-token prefill, and 16 streams with synthetic
# speculation, alternated, two rounds; then the packed_moe path tests and Qwen3-Next 8L Q4_K_M's prompts (512 experts).
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#   && git archive --format=tar.gz 5441616 -o .base/prev.tar
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
quantize_q4km
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
for R in 1 2; do for T in src prev; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 70 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 1 --repeats 1 --prefill-lens 32,64 > /tmp/b.log 2>&1)
  echo "== $T c1 round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 60 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 16 --repeats 1 --speculative-config "$SPEC" > /tmp/b.log 2>&1)
  echo "== $T c16 spec round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
done; done
run_tests paths 90 tests/kernels/test_packed_moe.py -k "path"
# 512-expert models (top 10) move prompts of 103-204 tokens to packed_mmq (2-4 pairs an expert): not yet measured
[ $(( $(date +%s)-S )) -lt 420 ] && timeout -s INT 60 python3 -m strata.cli.main quantize \
  'random:qwen3-next-80b-a3b?num_hidden_layers=8' /tmp/next.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
for T in src prev; do
  [ $(( $(date +%s)-S )) -lt 500 ] || break
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 60 python3 -m strata.cli.main bench offline \
    /tmp/next.gguf --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 16 \
    --concurrency 1 --repeats 1 --prefill-lens 96,128,192 > /tmp/b.log 2>&1)
  echo "== $T next prefill rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "prefill" /tmp/b.log | tee -a $OUT/ab.txt
done
