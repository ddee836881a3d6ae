# Session 62 (~8 minutes, any card; after next_call80.sh): issue 28's and issue 29's speculation sweeps at HEAD
# (session 62 measured only 4 streams): Qwen3-Next 8L bf16 at 1 / 2 / 4 / 8 / 16 / 32 streams, then Qwen4-Exp 4L with
# its default PLE at 1 / 4 / 8 / 16, synthetic L = 3, k = 3, 32 prompts of 64 tokens, 128 out, against none.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
sweep() {  # NAME MODEL CONCURRENCY SECONDS
  timeout -s INT $4 python3 -m strata.cli.main bench offline "$2" --device cuda --max-model-len 4096 --num-prompts 32 \
    --input-len 64 --output-len 128 --concurrency $3 --repeats 1 --speculative-config "$SPEC" --spec-baseline \
    --output $OUT/$1.json > $OUT/$1.log 2>&1
  echo "== $1 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_" $OUT/$1.log | cut -c1-220
}
sweep next_spec 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 1,2,4,8,16,32 200
sweep q4e_spec 'random:qwen4exp-125b?num_hidden_layers=4' 1,4,8,16 260
