# Prepared in session 41 (its device was withdrawn before this ran): staging copies as raw cudaMemcpyAsync calls
# (strata/dma.py) and the staging plan in plain Python (session 41's call 1: 122 us a layer queueing 3 experts'
# copies, ~170 us more in the rest of the host part). The offload GPU tests (test_staging_copies_are_runtime_copies_*
# is new); the timeline with --pcie-frac 0 and 0.5 (and the exchange's copies as kernels); issue 23's offload command at 25 % and 50 %, pcie 0 / 0.5 / auto.
# Build the archive first: git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -4 $OUT/tests.log
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
# STRATA_SM_EXCHANGE=1: the split graphs' routing / rows / CPU sum moved by kernels, not copy nodes ("between host
# parts", the next piece's launch, was 57 us a layer in session 41's call 1)
for ARM in 0:0 0:1 0.5:0; do
  IFS=: read P SM <<< "$ARM"
  STRATA_SM_EXCHANGE=$SM timeout -s INT 80 python3 offload_timeline.py /tmp/q4km.gguf pcie=$P arms=16:5000 \
    > $OUT/timeline_p${P}_sm$SM.txt 2>&1
  echo "== timeline pcie $P sm $SM rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads" $OUT/timeline_p${P}_sm$SM.txt | cut -c1-400
done
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --expert-split uniform --repeats 2"
for ARM in 25%:0 25%:0.5 25%:auto 50%:0 50%:0.5; do
  IFS=: read C P <<< "$ARM"; NAME=off${C%\%}_p$P
  timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $C --pcie-frac $P \
    --output $OUT/$NAME.json > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-160)"
done
