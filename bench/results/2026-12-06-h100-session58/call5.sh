# Session 58 (~5 minutes): packed_mmq's epilogue per sub-block pair (the integer product times the sub-block's integer
# scale, one conversion and one multiply-add with dx a sub-block, d / dmin once a superblock; sm_90 SASS of the grouped
# Q4_K gate/up 3,160 -> 2,912 instructions, Q6_K down's stack 104 -> 72 bytes) against the commit before it
# (.base/prev.tar): the packed_mmq / packed_moe GPU tests; mmq_prompt_ab.py (16-128 tokens of the 30B-A3B experts,
# the pairs and packed_mmq) in both trees, two alternated rounds; then issue 23's c1 with 64-token prompts through
# packed_mmq (STRATA_Q8_PAIRS_PER_EXPERT=2) against the pairs (the default), alternated.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#   && git archive --format=tar.gz HEAD~1 -o .base/prev.tar
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev && cp /tmp/src/mmq_prompt_ab.py /tmp/src/graph_timing.py /tmp/prev/
run_tests mmq 120 -n 4 tests/kernels/test_packed_mmq.py tests/kernels/test_packed_moe.py -k "mmq or grouped or path"
for R in 1 2; do for T in prev src; do
  (cd /tmp/$T && ARM=$T PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 60 python3 mmq_prompt_ab.py >> $OUT/mmq_ab.txt 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/mmq_ab.txt
done; done
cat $OUT/mmq_ab.txt | cut -c1-200
quantize_q4km
for ARM in pairs mmq; do
  [ $(( $(date +%s)-S )) -lt 400 ] || break
  E=""; [ $ARM = mmq ] && E="STRATA_Q8_PAIRS_PER_EXPERT=2"
  env $E timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --prefill-lens 64,128 \
    --output $OUT/c1_$ARM.json > /tmp/b.log 2>&1
  echo "== c1 $ARM rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
done
