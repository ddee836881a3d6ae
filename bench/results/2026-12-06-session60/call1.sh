# Session 60, call 1 (~9 minutes, any card; say which): the open issues' commands at HEAD in one machine start.
# Issue 23's 30B-A3B 24L Q4_K_M at 1 / 8 / 16 streams and a 512-token prefill (session 50's call1.sh without its
# offload runs); issue 28's Qwen3-Next 8L bf16 at 1 / 8 / 16 streams and a 512-token prefill, then its synthetic
# speculation (L = 3, k = 3) against none at 1 / 2 / 4 / 8 streams.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L | tee $OUT/card.txt
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
quantize_q4km | tee -a $OUT/ab.txt
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4km.json > /tmp/b.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 150 python3 -m strata.cli.main bench offline "$NEXT" --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 --output $OUT/next80_8l.json \
  > /tmp/b.log 2>&1
echo "== issue 28 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
timeout -s INT $(( 560 - ($(date +%s)-S) )) python3 -m strata.cli.main bench offline "$NEXT" --device cuda --max-model-len 4096 \
  --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,2,4,8 --repeats 1 --speculative-config "$SPEC" \
  --spec-baseline --output $OUT/next80_spec.json > $OUT/spec.log 2>&1
echo "== issue 28 spec rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_|at most" $OUT/spec.log | cut -c1-200 | tee -a $OUT/ab.txt
