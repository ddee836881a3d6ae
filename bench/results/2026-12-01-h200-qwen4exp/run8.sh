export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
M4='random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none'
M4P='random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=1000000'
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== qwen4exp 4 layers + PLE (16M-row table on the GPU), c1,8 + prefill 512"
timeout 170 python3 -m strata.cli.main bench offline "$M4P" $ARGS --concurrency 1,8 --prefill-lens 512 --output $OUT/qwen4exp4_ple_bf16.json > $OUT/qwen4exp4_ple_bf16.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_ple_bf16.log | tail -6
echo "== synthetic speculation L=3 k=3 vs none, 1/4/8/16 streams"
timeout 260 python3 -m strata.cli.main bench offline "$M4" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,4,8,16 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/qwen4exp4_spec.json > $OUT/qwen4exp4_spec.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen4exp4_spec.log | tail -10
echo "== qwen3.6-35b-a3b 8 layers bf16 c1,8,16"
timeout 120 python3 -m strata.cli.main bench offline 'random:qwen3.6-35b-a3b?num_hidden_layers=8' $ARGS --concurrency 1,8,16 --output $OUT/qwen36_8l_bf16.json > $OUT/qwen36_8l_bf16.log 2>&1; echo rc=$?; grep -v "^{" $OUT/qwen36_8l_bf16.log | tail -5
