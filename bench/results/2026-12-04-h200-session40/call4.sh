# Session 40, call 4: offloaded layers in one graph launch and the packed kernel's workers polling between layers
# (95c68e3) against the tree before (26c84f7): the offload GPU tests, offload_timeline.py's arms (pool threads:poll us),
# then issue 23's offload command (25 % of the 30B-A3B Q4_K_M's experts on the GPU, 16 CPU threads) in each tree,
# the static split (whole layers, like llama.cpp's -ncmoe) and 50 %.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
lscpu | grep -E "Model name|Thread|Core|Socket|NUMA node\(s\)|L3" > $OUT/lscpu.txt; cat $OUT/lscpu.txt
timeout -s INT 45 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/experts/test_expert_offload_gpu.py \
  tests/experts/test_packed_experts.py > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
timeout -s INT 110 python3 offload_timeline.py /tmp/q4km.gguf arms=16:5000,16:200,15:5000 > $OUT/timeline.txt 2>&1
echo "== timeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline.txt | cut -c1-330
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 64 --repeats 2 --concurrency 1
  --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0"
D=/tmp/old; mkdir -p $D && tar -xzf $OLDPWD/.base/bis/26c84f7.tgz -C $D
for ARM in old:25%:uniform new:25%:uniform new:25%:static new:50%:uniform; do
  IFS=: read TREE CACHE SPLIT <<< "$ARM"; NAME=${TREE}_${CACHE%\%}_$SPLIT; R=/tmp/src; [ $TREE = old ] && R=$D
  (cd $R && PYTHONPATH=$R:/tmp/site:/tmp/hf timeout -s INT 110 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    $OFF --expert-cache $CACHE --expert-split $SPLIT --output $OUT/$NAME.json) > $OUT/$NAME.log 2>&1
  echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-110)"
done
