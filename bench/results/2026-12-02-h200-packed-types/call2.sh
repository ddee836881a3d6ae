export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
echo "== quantize q4_k_m"; timeout 100 python3 -m strata.cli.main quantize "$M4" /tmp/q4e.gguf --scheme q4_k_m --device cuda 2>&1 | tail -1
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== qwen4exp 4 layers q4_k_m, flag on, c1,8,16 + prefill 512"
timeout 180 python3 .base/q8on.py bench offline /tmp/q4e.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/qwen4exp4_q4km_q8p.json > $OUT/qwen4exp4_q4km_q8p.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_q4km_q8p.log | grep -v "^ " | tail -8
echo "== profile eager c1"
timeout 90 python3 .base/prof_q4k.py /tmp/q4e.gguf > $OUT/prof_q4k.txt 2>&1; echo rc=$?; head -30 $OUT/prof_q4k.txt | cut -c1-80,150-260
