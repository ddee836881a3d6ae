# Session 41, call 1: issue 23's expert offload. (1) offload_check.py: HEAD's 25 % greedy tokens against all-resident,
# with top logprobs (rounding or a bug?); (2) offload_timeline.py with --pcie-frac 0 and 0.5 (where the staged arm's
# time goes: the `stage` calls timed); (3) the offload command at 25 %, pcie 0 (3 repeats) and 0.5 (2 repeats).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 110 python3 offload_check.py /tmp/q4km.gguf > $OUT/check.txt 2>&1
echo "== check rc=$? t=$(( $(date +%s)-S ))"; grep -E "expert_cache|token [0-2]|missed|equal" $OUT/check.txt | cut -c1-400
for P in 0 0.5; do
  timeout -s INT 80 python3 offload_timeline.py /tmp/q4km.gguf pcie=$P arms=16:5000 > $OUT/timeline_p$P.txt 2>&1
  echo "== timeline pcie $P rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads" $OUT/timeline_p$P.txt | cut -c1-400
done
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --expert-cache 25% --expert-split uniform"
for ARM in 0:3 0.5:2; do
  IFS=: read P R <<< "$ARM"
  timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --pcie-frac $P --repeats $R \
    --output $OUT/off25_p$P.json > $OUT/off25_p$P.log 2>&1
  echo "== off25 pcie $P rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/off25_p$P.log | cut -c1-160)"
done
