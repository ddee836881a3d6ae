# Session 27, call 3 (carry [".whl", ".base"]): the staged-graph tests call 2 stopped at a stale assertion, on the
# code of the session's end (ring on the copy engines, its copies after the step's uploads).
source tools/gpu_ab/device_setup.sh
timeout -s INT 100 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py --tb=short \
  -k "staged_host_kv_replays" > $OUT/tests.log 2>&1
echo rc=$?; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | cut -c1-200
