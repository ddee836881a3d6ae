# Session 22's first device call (prepared in session 21): `bash tools/gpu_ab/next_call1.sh` with carry
# [".whl", ".base"] after building the archive (device_setup.sh says how; the wheels: fastapi, starlette,
# pydantic + pydantic-core + annotated-types + typing-inspection, uvicorn, gguf, jsonschema + its specs +
# referencing + rpds-py, llguidance, annotated-doc, opentelemetry-api, typing-extensions; transformers 5.24.0
# in .whl/hf, which needs no newer huggingface-hub than the image's).
# 1. the MTP split graph test that failed in session 20 (not re-run since), with full tracebacks;
# 2. issue 28's speculation sweep at 1 / 2 / 4 / 8 streams (the before of any host-time change);
source tools/gpu_ab/device_setup.sh
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== test"; timeout -s INT 120 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py \
  --tb=long -k "fresh_prompts_beside_verification_windows" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | tail -5 | cut -c1-200
echo "== spec sweep"; timeout -s INT 300 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 \
  --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,2,4,8 --repeats 1 \
  --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline \
  --output $OUT/spec_sweep.json > $OUT/spec_sweep.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "strata_|speedup" $OUT/spec_sweep.log | tail -10 | cut -c1-200
