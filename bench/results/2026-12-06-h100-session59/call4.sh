# Session 59 (~5 minutes): issue 23's 30B-A3B Q4_K_M at fe63084 (packed_mmq's word unpack on by default, a prompt's
# boundary at 3 pairs an expert): c1 with 64-token prefill, the word unpack on (default) against off
# (STRATA_MMQ_WORD_UNPACK=0), alternated, two rounds; then the issue's c1 / c8 / c16 and 512-token prefill once.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
quantize_q4km
for R in 1 2; do for W in 1 0; do
  [ $(( $(date +%s)-S )) -lt 200 ] || break
  STRATA_MMQ_WORD_UNPACK=$W timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 8 --input-len 64 --output-len 64 --concurrency 1 --repeats 1 --prefill-lens 64,128 \
    > /tmp/b.log 2>&1
  echo "== words=$W round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt
  grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
done; done
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/issue23.json > /tmp/b.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
