export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
echo "== words A/B"; timeout 170 python3 .base/words_ab.py > $OUT/words_ab.log 2>&1; echo rc=$?; grep -v "^ERROR" $OUT/words_ab.log | cut -c1-330; grep -c "^ERROR" $OUT/words_ab.log
echo "== gemv tests"; timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_gemv.py > $OUT/gemv_tests.log 2>&1; echo rc=$?; tail -4 $OUT/gemv_tests.log | cut -c1-300
echo "== quantize"; timeout 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda 2>&1 | tail -1
ARGS="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1"
echo "== bench q4e"; timeout 120 python3 -m strata.cli.main bench offline /tmp/q4e.gguf $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4e_words.json > $OUT/q4e_words.log 2>&1; echo rc=$?; grep -E "strata_c|prefill_" $OUT/q4e_words.log | tail -5
echo "== issue 28 baseline decode"; timeout 200 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' $ARGS --concurrency 1,8,16 --prefill-lens 512 --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1; echo rc=$?; grep -E "strata_c|prefill_|copy" $OUT/next80_8l.log | tail -6
