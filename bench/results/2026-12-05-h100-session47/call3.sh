# call 3 (still warm), from the repository root with carry [".whl", ".base"]
source tools/gpu_ab/device_setup.sh; S=$(date +%s)
for T in tests/engine/test_prompt_logprobs.py:60 tests/sample:60 tests/spec:170; do N=$(basename ${T%:*} .py)
  timeout -s INT ${T#*:} python3 -m pytest -q -p no:cacheprovider ${T%:*} -m gpu > $OUT/tests_$N.log 2>&1
  echo "== ${T%:*} rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_$N.log | tail -6; done
