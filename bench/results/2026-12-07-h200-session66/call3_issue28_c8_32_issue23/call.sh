# Session 66 (~8 minutes, an H200): issue 28's speculation at 8, 16 and 32 streams (>= 1.2x at 8, never below 1.0x
# at 16 and 32; 64 prompts) on Qwen3-Next 8L bf16, then issue 23's commands on the machine its targets are for
# (30B-A3B 24L Q4_K_M: c1 / c8 / c16 and the 512-token prefill; the offload command at 25 %).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' \
  --device cuda --max-model-len 4096 --num-prompts 64 --input-len 64 --output-len 128 --concurrency 8,16,32 \
  --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' \
  --spec-baseline --output $OUT/next_c8_32.json > $OUT/next_c8_32.log 2>&1
echo "== issue 28 c8-32 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_" $OUT/next_c8_32.log | cut -c1-220
quantize_q4km
cat /tmp/q4km.gguf > /dev/null
timeout -s INT 200 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-200
[ $(( $(date +%s)-S )) -lt 470 ] && timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
  --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
  --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% --output $OUT/off25.json > $OUT/off25.log 2>&1
echo "== offload 25% rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25.log | cut -c1-200
