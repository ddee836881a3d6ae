# Session 42: issue 23's offload, the split and the zero-copy share (25 % and 50 % on the GPU, 16 CPU threads):
# uniform split (the same share of every layer) against static (whole first layers, like llama.cpp -ncmoe), and
# the zero-copy tier's share (session 42's call 1: zero copy 0.375 74.2 tok/s against pcie 0's 71.4).
# Build the archive first: git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --repeats 2"
for ARM in "25% uniform 0" "25% static 0" "25% uniform 0.25" "25% static 0.375" "50% uniform 0" "50% static 0"; do
  set -- $ARM
  NAME=off${1%\%}_$2_zc$3
  timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $1 --expert-split $2 \
    --zero-copy-frac $3 --output $OUT/$NAME.json > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-160)"
done
