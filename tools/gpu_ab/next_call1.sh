# Session 19's first device call (prepared in session 18). Build the tarball first:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cd /tmp/src && cp tools/gpu_ab/*.py .
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
echo "== GPU tests"; timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests --ignore=tests/server --deselect tests/sample/test_constraints.py -x -k "not packed_gemv" > $OUT/gpu_tests.log 2>&1; echo rc=$?; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | head -20 | cut -c1-250
echo "== bench"; timeout 150 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/next80_8l.json > $OUT/next80_8l.log 2>&1; echo rc=$?; grep -E "strata_c|prefill_|copy" $OUT/next80_8l.log | tail -6
echo "== route A/B"; timeout 60 python3 route_ab.py 2>&1 | cut -c1-200 | tail -9
echo "== verify profile"; timeout 100 python3 prof_hybrid.py "$M" eager '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' > $OUT/prof_spec.log 2>&1; echo rc=$?; grep -E "=====|kernel total" $OUT/prof_spec.log
echo "== moe A/B"; timeout 150 python3 moe_ab.py 2>&1 | cut -c1-300 | tail -8
