# For a later call of the next session (prepared in session 50, ~5 minutes): session 50's call 2 found the offload
# command at 50 % faster with --prompt-stream-min-pairs 6 than 32 by more than its TTFT explains (tok/s and TTFT give
# ~5.6 against ~6.3 ms a decode step, though one-row decode steps never stream). The same arms alternated three
# times, each run's JSON kept (tpot p50, decode step ms), to tell noise from an effect.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2 3; do for N in 32 6; do
  timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
    --repeats 3 --expert-cache 50% --prompt-stream-min-pairs $N --output /tmp/off_${N}_$R.json > /tmp/off.log 2>&1
  echo "== min_pairs $N round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt
  python3 -c "import json; r = json.load(open('/tmp/off_${N}_$R.json'))['results']['strata_c1']; print({k: round(v, 3) for k, v in r.items() if k.startswith('median_') and isinstance(v, float)})" >> $OUT/ab.txt 2>&1
done; done
cat $OUT/ab.txt | cut -c1-300
