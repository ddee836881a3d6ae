# Session 66 (~6 minutes, an H200): issue 29's speculation at 1, 8 and 16 streams (never below 1.0x; 32 prompts, one
# repeat) on Qwen4-Exp 4L bf16 with the default PLE, then issue 23's offload command at 50 % (target 185 tok/s).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 300 python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4' \
  --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,8,16 \
  --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' \
  --spec-baseline --output $OUT/q4e_c1_16.json > $OUT/q4e_c1_16.log 2>&1
echo "== issue 29 c1-16 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_" $OUT/q4e_c1_16.log | cut -c1-220
[ $(( $(date +%s)-S )) -lt 330 ] && quantize_q4km && timeout -s INT 70 python3 -m strata.cli.main bench offline \
  /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
  --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 50% --output $OUT/off50.json > $OUT/off50.log 2>&1
echo "== offload 50% rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off50.log | cut -c1-200
