# Session 60, call 1 (~9 minutes). On an H200: issue 23's commands (session 50's call1.sh: c1 / c8 / c16, 512-token
# prefill, offload at 25 % and 50 %), none run on an H200 since session 50. On an H100: issue 28's speculation sweep
# (synthetic L = 3, k = 3 against none at 1 / 2 / 4 / 8 streams) and Qwen3-Next 8L bf16 at 1 / 8 / 16 streams.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L | tee $OUT/card.txt
if nvidia-smi -L | grep -q H200; then
  bash bench/results/2026-12-05-session50/call1.sh 2>&1 | tee $OUT/issue23.txt
  exit
fi
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 330 python3 -m strata.cli.main bench offline "$NEXT" --device cuda --max-model-len 4096 --num-prompts 32 \
  --input-len 64 --output-len 128 --concurrency 1,2,4,8 --repeats 1 --speculative-config "$SPEC" --spec-baseline \
  --output $OUT/next80_spec.json > $OUT/spec.log 2>&1
echo "== issue 28 spec rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_|at most" $OUT/spec.log | cut -c1-200 | tee -a $OUT/ab.txt
timeout -s INT 200 python3 -m strata.cli.main bench offline "$NEXT" --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 --output $OUT/next80_8l.json \
  > /tmp/b.log 2>&1
echo "== issue 28 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
