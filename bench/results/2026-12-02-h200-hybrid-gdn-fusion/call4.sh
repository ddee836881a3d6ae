export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cp $ROOT/.base/prof_hybrid.py /tmp/src/prof_hybrid.py && cd /tmp/src
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
echo "== tests"; timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -k "topk_sum or fresh_prompts_beside or evicts or qwen4_exp_graphs or fused_routing or on_off" > $OUT/gpu_tests.log 2>&1; echo rc=$?; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | head -20 | cut -c1-250
echo "== profile eager"; timeout 100 python3 prof_hybrid.py "$M" eager > $OUT/prof_eager.log 2>&1; echo rc=$?; grep -E "=====|kernel total" $OUT/prof_eager.log
echo "== spec bench"; timeout 280 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/next80_spec.json > $OUT/next80_spec.log 2>&1; echo rc=$?; grep -E "strata_c|speedup|spec" $OUT/next80_spec.log | grep -v "^ *\"" | tail -20
