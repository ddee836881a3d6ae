# Session 40, call 6: PCIe staging inside the split graphs (HEAD): the offload GPU tests (graphs against the eager
# path, with --pcie-frac 0.5 too), issue 23's offload command at 25 % with the CPU alone (pcie 0) and with half of each
# layer's missed experts copied over PCIe (0.5) or the measured share (auto), 50 % with 0.5; quant_moe with the
# unsigned Q6_K; then offload_check (top logprobs) if time is left.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 45 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/experts/test_expert_offload_gpu.py \
  > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 64 --repeats 2 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0"
for ARM in 25%:0 25%:0.5 25%:auto 50%:0.5 25%:0; do
  IFS=: read CACHE PCIE <<< "$ARM"; NAME=off_${CACHE%\%}_pcie$PCIE; [ -e $OUT/$NAME.json ] && NAME=${NAME}_again
  timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $CACHE \
    --pcie-frac $PCIE --output $OUT/$NAME.json > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-110)"
  grep -E "^experts:" $OUT/$NAME.log | cut -c1-200
done
timeout -s INT 40 python3 qmoe_scale.py threads=16 pairs=6,8 > $OUT/qmoe.txt 2>&1; echo "== qmoe rc=$?"; cat $OUT/qmoe.txt
LEFT=$(( 300 - ($(date +%s)-S) )); [ $LEFT -gt 30 ] && timeout -s INT $LEFT python3 offload_check.py /tmp/q4km.gguf \
  > $OUT/check.txt 2>&1; echo "== check rc=$? t=$(( $(date +%s)-S ))"; grep -E "expert_cache|token 0|equal" $OUT/check.txt | cut -c1-300
