cd /work/main
for S in q4_k_m q3_k_m q2_k; do
  .venv/bin/python -m strata.cli.main bench offline /tmp/lowcpu/$S.gguf --device cpu --max-model-len 512 --num-prompts 4 \
    --input-len 32 --output-len 64 --concurrency 1 --repeats 2 --cpu-matmul int8 --output /tmp/lowcpu/${S}_int8.json > /tmp/lowcpu/${S}_int8.log 2>&1
  echo "$S int8: $(grep tok/s /tmp/lowcpu/${S}_int8.log | tail -1)"
done
