# Prepared in session 75 (~9 minutes; run under a 600 s limit): the pairs' gate/up launch rounding its own output for
# down (no quantize launch between them; STRATA_PAIRS_ROUNDING=0 keeps the launch). Its GPU tests (and the shared
# arrival counters' users: the fused attention merge, argmax), the one-stream A/B in one process (env_ab.py), then
# on an H200 issue 23's c1 / c8 / c16 / prefill 512 and the offload command at 25 % (targets 740 / 2,200 / 2,200 /
# 18,000 / 150), on an H100 issue 23's c1 / c8 with and without it, two alternated rounds.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
quantize_q4km
run_tests rounding 120 tests/kernels/test_packed_q8.py tests/kernels/test_kernels.py \
  -k "rounds_its_own or moe_pairs or fused_merge or argmax"
timeout -k 5 -s INT 120 python3 env_ab.py /tmp/q4km.gguf PAIRS_ROUNDING=0 3 > $OUT/env_ab.txt 2>&1
echo "== env_ab rc=$? t=$(( $(date +%s)-S ))"; tail -6 $OUT/env_ab.txt
if nvidia-smi -L | grep -q H200; then
  issue23 150
  [ $(left 500) -gt 70 ] && offload25 off25_avx512 80
  [ $(left 580) -gt 70 ] && STRATA_CPU_QUANT_ISA=avx2 offload25 off25_avx2 80
  exit 0
fi
for R in 1 2; do for ARM in on off; do
  [ $(left 580) -gt 60 ] || break
  (export STRATA_PAIRS_ROUNDING=$([ $ARM = off ] && echo 0 || echo 1)
   timeout -k 5 -s INT $(( $(left 580) < 90 ? $(left 580) : 90 )) python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
     --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 \
     --output $OUT/q4km_${ARM}_r$R.json > /tmp/b.log 2>&1; echo "== $ARM r$R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt
   grep -E "strata_c" /tmp/b.log >> $OUT/ab.txt)
done; done
cut -c1-150 $OUT/ab.txt
exit 0
