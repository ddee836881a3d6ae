export PYTHONUNBUFFERED=1
rm -rf .base/strata
export PYTHONPATH=$PWD:/tmp/site
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== qwen4exp 4 layers q4_k_m, c1,8, graphs up to 8 slots"
timeout 150 python3 -m strata.cli.main bench offline /tmp/q4e.gguf $ARGS --concurrency 1,8 --cuda-graph-max-slots 8 --output $OUT/qwen4exp4_q4km_s8.json > $OUT/qwen4exp4_q4km_s8.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_q4km_s8.log | grep -v "^ " | tail -6; nvidia-smi --query-gpu=memory.used --format=csv
