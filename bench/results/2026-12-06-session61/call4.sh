# Session 61 (~3 minutes, any card): issue 29's synthetic speculation at 4 streams again (call 1 gave 1.48x; the issue
# asks 1.5x), two repeats, the random shape's default PLE.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 230 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 2 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/q4e_spec_c4.json > $OUT/spec.log 2>&1
echo "== issue 29 spec c4 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_" $OUT/spec.log | cut -c1-220
