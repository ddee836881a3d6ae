# Session 60, call 2 (~9 minutes; after call 1, on the machine it left warm): issues 28 and 29's commands at HEAD.
# Qwen3-Next 8L bf16: synthetic speculation (L = 3, k = 3) against none at 1 / 2 / 4 / 8 streams, then 1 / 8 / 16
# streams and a 512-token prefill; Qwen4-Exp 4L at Q4_K_M, one stream.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L | tee $OUT/card.txt
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 260 python3 -m strata.cli.main bench offline "$NEXT" --device cuda --max-model-len 4096 --num-prompts 32 \
  --input-len 64 --output-len 128 --concurrency 1,2,4,8 --repeats 1 --speculative-config "$SPEC" --spec-baseline \
  --output $OUT/next80_spec.json > $OUT/spec.log 2>&1
echo "== issue 28 spec rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_|at most" $OUT/spec.log | cut -c1-200 | tee -a $OUT/ab.txt
timeout -s INT 170 python3 -m strata.cli.main bench offline "$NEXT" --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 --output $OUT/next80_8l.json \
  > /tmp/b.log 2>&1
echo "== issue 28 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
[ $(( $(date +%s)-S )) -lt 470 ] && timeout -s INT 50 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4' \
  /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
[ $(( $(date +%s)-S )) -lt 520 ] && timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda \
  --max-model-len 4096 --num-prompts 8 --input-len 128 --output-len 128 --concurrency 1 --repeats 2 \
  --output $OUT/q4e_q4km.json > /tmp/b.log 2>&1
echo "== issue 29 q4_k_m rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
