# Prepared in session 42 for the next session's first call (issue 23's offload): (1) zero_copy_ab.py's tiling sweep
# of the pairs kernel reading host memory in place (session 42: 27 GB/s at 6 pairs against the copy engine's 47);
# (2) the new default, --zero-copy-frac auto (40 % of each layer's missed experts), at 25 % and 50 % on the GPU,
# uniform and static, and 25 % uniform with --zero-copy-frac measure (the share timed at start), each arm twice in
# alternation (session 42's arms were one run each; runs of one arm have spread 5-50 % across machine starts); first
# the zero-copy GPU tests (auto and measure are new). Build the archive first:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 100 python3 zero_copy_ab.py pairs=6 sweep=4:2:1:3/16:2:1:3/2:1:1:4/8:1:2:4/32:1:4:4/8:2:4:2 \
  > $OUT/zero_copy_sweep.txt 2>&1
echo "== zero copy sweep rc=$? t=$(( $(date +%s)-S ))"; cut -c1-200 $OUT/zero_copy_sweep.txt
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null  # the file in the page cache before the first timed arm (session 42's first arm timed out)
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1
  --cpu-threads 16 --expert-swap-interval 0 --repeats 2"
for ROUND in a; do
  for ARM in "25% uniform auto" "25% static auto" "50% uniform auto" "50% static auto" "25% uniform measure"; do
    set -- $ARM
    NAME=off${1%\%}_$2_$3_$ROUND
    timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $1 --expert-split $2 \
      --zero-copy-frac $3 --output $OUT/$NAME.json > $OUT/$NAME.log 2>&1
    grep -E "zero_copy_frac measure|read in place" $OUT/$NAME.log | head -1 | cut -c1-200
    echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-160)"
  done
done
