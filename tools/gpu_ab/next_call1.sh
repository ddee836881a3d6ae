# Session 23's first device call (prepared in session 22): `bash tools/gpu_ab/next_call1.sh` with carry
# [".whl", ".base"] after building the archive (device_setup.sh says how; the wheels: fastapi, starlette,
# pydantic + pydantic-core + annotated-types + typing-inspection, uvicorn, gguf, jsonschema + its specs +
# referencing + rpds-py, llguidance, annotated-doc, opentelemetry-api, typing-extensions; transformers 5.24.0
# in .whl/hf, which needs no newer huggingface-hub than the image's).
# 1. packed_q8's GPU tests in full (session 22's call 5 stopped after 66 of them);
# 2. issue 23's and issue 29's Q4_K_M decode commands on the commit with Q6_K's whole-word funnel (3747258+),
#    which no whole-model run has measured yet;
# 3. the MTP split graph test that failed in session 20 (not re-run since) and issue 28's speculation sweep.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
echo "== q8 tests"; timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py tests/kernels/test_packed_mmq.py \
  tests/kernels/test_packed_moe.py > $OUT/q8_tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/q8_tests.log | tail -5 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -4 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== q4e rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e.log | tail -4 | cut -c1-200
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
echo "== mtp split test"; timeout -s INT 100 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py \
  --tb=long -k "fresh_prompts_beside_verification_windows" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | tail -5 | cut -c1-200
