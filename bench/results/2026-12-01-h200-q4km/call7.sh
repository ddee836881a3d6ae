export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== quantize"; timeout 60 python3 -m strata.cli.main quantize "$M" /tmp/q4km.gguf --scheme q4_k_m --device cuda 2>&1 | head -1
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 64 --repeats 1 --concurrency 1 --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0"
echo "== offload 25%"; timeout 75 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache 25% --output $OUT/q4km_offload25.json > $OUT/q4km_offload25.log 2>&1; echo rc=$?; tail -2 $OUT/q4km_offload25.log
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --repeats 1"
echo "== q4km decode c1,8,16 + prefill 512"; timeout 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1; echo rc=$?; tail -4 $OUT/q4km.log
echo "== offload 50%"; timeout 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache 50% --output $OUT/q4km_offload50.json > $OUT/q4km_offload50.log 2>&1; echo rc=$?; tail -2 $OUT/q4km_offload50.log
