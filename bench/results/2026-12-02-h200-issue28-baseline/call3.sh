export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
export PYTHONPATH=$PWD:/tmp/site:/tmp/hf
echo "== quantize"; timeout 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda 2>&1 | tail -1
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== bench q4e"; timeout 110 python3 -m strata.cli.main bench offline /tmp/q4e.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4e_q6words.json > $OUT/q4e_q6words.log 2>&1; echo rc=$?; grep -E "strata_c|prefill_" $OUT/q4e_q6words.log | tail -5
echo "== issue 28 baseline spec"; timeout 220 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 2 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/next80_spec.json > $OUT/next80_spec.log 2>&1; echo rc=$?; grep -vE "^ *[{}\"\[]" $OUT/next80_spec.log | tail -8
echo "== GPU tests"; timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_gemv.py tests/runner/test_cuda_graphs.py tests/spec > $OUT/gpu_tests.log 2>&1; echo rc=$?; tail -6 $OUT/gpu_tests.log | cut -c1-300
