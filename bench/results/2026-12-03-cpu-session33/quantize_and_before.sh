cd /work/main
M='random:qwen3-30b-a3b?num_hidden_layers=2&vocab_size=32768'
for S in q4_k_m q3_k_m q2_k; do
  /usr/bin/time -f "quantize $S %e s %M KB" .venv/bin/python -m strata.cli.main quantize "$M" /tmp/lowcpu/$S.gguf --scheme $S > /tmp/lowcpu/q_$S.log 2>&1
  ls -la /tmp/lowcpu/$S.gguf
done
for R in 1 2; do for S in q4_k_m q3_k_m q2_k; do
  .venv/bin/python -m strata.cli.main bench offline /tmp/lowcpu/$S.gguf --device cpu --max-model-len 512 --num-prompts 4 \
    --input-len 32 --output-len 64 --concurrency 1 --repeats 1 --output /tmp/lowcpu/${S}_r$R.json > /tmp/lowcpu/${S}_r$R.log 2>&1
  echo "$S r$R: $(grep tok/s /tmp/lowcpu/${S}_r$R.log | tail -1)"
done; done
