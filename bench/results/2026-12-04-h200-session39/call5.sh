# Session 39, call 5: issue 23's expert-offload targets again (30B-A3B 24L Q4_K_M, 25 % / 50 % of the experts on the
# GPU, the rest computed by 16 CPU threads; last measured in session 22: 173.9 / 173.6 tok/s, targets 150 / 185).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 64 --repeats 2 --concurrency 1
  --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0"
for c in 25 50; do
  timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $c% \
    --output $OUT/q4km_offload$c.json > $OUT/q4km_offload$c.log 2>&1
  echo "== offload $c% rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km_offload$c.log | tail -1 | cut -c1-200
done
