source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 330 python3 split_graph_bisect.py qwen4_exp qwen3_next > $OUT/bisect.txt 2>$OUT/bisect.err
echo "== bisect rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/bisect.txt; tail -3 $OUT/bisect.err
timeout -s INT 230 python3 -m pytest -q -p no:cacheprovider tests/runner/test_pipeline.py -m gpu -k cuda_graphs \
  > $OUT/tests_graphs.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_graphs.log | tail -8
