export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
echo "== packed GPU tests"; timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_packed_moe.py tests/kernels/test_packed_gemv.py tests/experts -p no:cacheprovider > $OUT/tests.log 2>&1; echo rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -12
echo "== micro"; timeout 100 python3 .base/micro.py > $OUT/micro.log 2>&1; tail -20 $OUT/micro.log
M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== quantize"; timeout 80 python3 -m strata.cli.main quantize "$M" /tmp/q4km.gguf --scheme q4_k_m --device cuda 2>&1 | head -2
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --repeats 1"
echo "== q4km decode c1,8,16 + prefill 512"; timeout 130 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1; echo rc=$?; tail -4 $OUT/q4km.log
echo "== q4km 25% experts on the GPU, 16 CPU threads"; timeout 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 64 --repeats 1 --concurrency 1 --expert-cache 25% --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0 --output $OUT/q4km_offload25.json > $OUT/q4km_offload25.log 2>&1; echo rc=$?; tail -3 $OUT/q4km_offload25.log
