# Prepared in session 43 (no device lent): the pipeline split's GPU tests on one card (STRATA_PIPELINE_SHARE_GPUS:
# two stage processes on cuda:0), now with Qwen4-Exp (its streams crossing the split) and the packed-weight fix
# (a stage loads only its own packed weights) and graphs per stage; the offload GPU tests (the expert manager's layer
# ids changed). The split bench is next_call9.sh.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runner/test_pipeline.py > $OUT/tests_pipeline.log 2>&1
echo "== pipeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_pipeline.log | tail -8
timeout -s INT 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/experts/test_expert_offload_gpu.py \
  > $OUT/tests_offload.log 2>&1
echo "== offload rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_offload.log | tail -8
