# Call 1: packed GPU tests, a Q4_K_M file of the 24-layer Qwen3-30B-A3B shape, decode/prefill of it beside bf16
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; free -g | head -2
M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== packed GPU tests"; timeout 200 python3 -m pytest -q -m gpu tests/kernels/test_packed_moe.py tests/kernels/test_packed_gemv.py tests/experts -p no:cacheprovider -x > $OUT/tests.log 2>&1; echo rc=$?; tail -25 $OUT/tests.log
echo "== quantize"; timeout 150 python3 -m strata.cli.main quantize "$M" /tmp/q4km.gguf --scheme q4_k_m --device cuda 2>&1 | tail -6
ls -la /tmp/q4km.gguf
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --repeats 1"
echo "== q4km decode c1,8,16 + prefill 512"; timeout 170 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1; echo rc=$?; tail -30 $OUT/q4km.log
echo "== bf16 decode c1,8,16 + prefill 512"; timeout 120 python3 -m strata.cli.main bench offline "$M" $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/bf16.json > $OUT/bf16.log 2>&1; echo rc=$?; tail -12 $OUT/bf16.log
