# Session 48, after call 2 (the exchange by kernels +7 %): the exchange by kernels is the default now. (1) issue 23's
# offload command at 25 % and 50 % static (zero copy auto), (2) every offload GPU test (STRATA_COPY_EXCHANGE=1 is the
# copy-node arm beside the ring), (3) the prompt-logprobs GPU test (HF's float32 now compared on the prompt's mean).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
[ -f /tmp/q4km.gguf ] || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' \
  /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --repeats 2"
for CACHE in 25% 50%; do
  timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $CACHE \
    --output $OUT/off${CACHE%\%}.json > $OUT/off${CACHE%\%}.log 2>&1
  echo "== offload $CACHE rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off${CACHE%\%}.log | cut -c1-160
done
timeout -s INT 60 python3 -m pytest -q -p no:cacheprovider tests/engine/test_prompt_logprobs.py -m gpu \
  > $OUT/tests_prompt_logprobs.log 2>&1
echo "== prompt logprobs GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_prompt_logprobs.log | tail -4
timeout -s INT 170 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py \
  > $OUT/tests_offload_gpu.log 2>&1
echo "== offload GPU tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_offload_gpu.log | tail -6
