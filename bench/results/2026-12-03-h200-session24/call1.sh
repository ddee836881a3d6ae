# Session 24's first device call: `bash tools/gpu_ab/next_call1.sh` with carry [".whl", ".base"] after building
# the archive (device_setup.sh says how; the wheels: fastapi, starlette, pydantic + pydantic-core +
# annotated-types + typing-inspection, uvicorn, gguf, jsonschema + its specs + referencing + rpds-py, llguidance,
# annotated-doc, opentelemetry-api, typing-extensions; transformers 5.24.0 in .whl/hf).
# 1. packed_q8's and packed_mmq's GPU tests (packed_mmq has never run on a GPU);
# 2. packed_mmq against the pairs and the float grouped kernels at 1-64 tokens (mmq_ab.py);
# 3. issue 23's Q4_K_M decode command on the current commit.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
echo "== q8 tests"; timeout -s INT 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_mmq.py \
  tests/kernels/test_packed_q8.py tests/kernels/test_packed_moe.py > $OUT/q8_tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/q8_tests.log | tail -8 | cut -c1-300
echo "== mmq ab"; timeout -s INT 130 python3 mmq_ab.py > $OUT/mmq_ab.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); cut -c1-400 $OUT/mmq_ab.log | tail -14
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 110 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -4 | cut -c1-200
