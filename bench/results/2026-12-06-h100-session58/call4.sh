# Session 58 (~7 minutes): one token's routing from ranks (routing.pick_topk_ranked: two reductions in place of
# TOP_K max passes) on the GPU: the routing tests, then issue 23's c1 with ranks (HEAD), with the max passes
# (STRATA_NO_RANKED_TOPK=1) and with ranks plus the fused merge at one sequence (STRATA_FUSED_MERGE=1; session 52
# measured it even), alternated, two rounds; then each routing's kernels at one stream (trace_steps.py).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
run_tests routing 150 -n 4 tests/kernels/test_fused_ops.py -k "route or ranked or routing or topk"
quantize_q4km
for R in 1 2; do for ARM in ranked passes fused_merge; do
  case $ARM in ranked) E="";; passes) E="STRATA_NO_RANKED_TOPK=1";; fused_merge) E="STRATA_FUSED_MERGE=1";; esac
  env $E timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/${ARM}_r$R.json \
    > /tmp/b.log 2>&1
  echo "== $ARM round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
done; done
for ARM in ranked passes; do
  [ $(( $(date +%s)-S )) -lt 480 ] || break
  E=""; [ $ARM = passes ] && E="STRATA_NO_RANKED_TOPK=1"
  env $E timeout -s INT 60 python3 trace_steps.py /tmp/q4km.gguf /tmp/trace_$ARM 1 > /tmp/tr.log 2>&1
  echo "== trace $ARM rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/trace.txt; grep -E "===|_route_kernel|_merge|_split" /tmp/tr.log | head -8 | tee -a $OUT/trace.txt
done
