# Session 53 (~7 minutes, on an H200 only; after next_call56.sh and next_call57.sh): issue 23's commands on the
# machine its targets are for, none run there since session 50 (before the pairs' K-step sums and the fused merge by
# default): session 50's call 1.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s INT 200 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-160
for cache in 25% 50%; do
  timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
    --repeats 3 --expert-cache $cache --output $OUT/off${cache%\%}.json > $OUT/off${cache%\%}.log 2>&1
  echo "== offload $cache rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off${cache%\%}.log | cut -c1-160
done
