# Prepared in session 45: the GPU tests its changes touch in one process: _forward_split (graph parts), the seeded
# verification windows (tests/spec, tests/sample on CUDA), prompt logprobs from prompt graphs (session 46);
# the offload GPU tests run in next_call14.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
for T in tests/sample:60 tests/engine/test_prompt_logprobs.py:60 tests/spec:170 tests/runner/test_cuda_graphs.py:280; do
  N=$(basename ${T%:*} .py)
  timeout -s INT ${T#*:} python3 -m pytest -q -p no:cacheprovider ${T%:*} -m gpu > $OUT/tests_$N.log 2>&1
  echo "== ${T%:*} rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_$N.log | tail -6
done
