export PYTHONUNBUFFERED=1
rm -rf .base/strata  # an old tree, which scripts in .base would import before this one
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
echo "== micro"; timeout 120 python3 .base/micro.py > $OUT/micro.log 2>&1; tail -22 $OUT/micro.log
M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== quantize"; timeout 100 python3 -m strata.cli.main quantize "$M" /tmp/q4km.gguf --scheme q4_k_m --device cuda 2>&1 | tail -1; date
echo "== profile"; timeout 100 python3 .base/profile_q4km.py /tmp/q4km.gguf > $OUT/profile.log 2>&1; echo rc=$?
grep -E "=====|building|warm|Self CUDA time|_kernel|gemm|Memcpy|Memset|elementwise|reduce|index" $OUT/profile.log | cut -c1-60,100-175 | head -60
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --repeats 1"
echo "== q4km decode c1,8,16 + prefill 512"; timeout 150 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1; echo rc=$?; tail -5 $OUT/q4km.log
