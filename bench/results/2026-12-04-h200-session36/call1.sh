REPO=$PWD
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
t() { echo "== $1 rc=$2 t=$(( $(date +%s)-S ))"; }
python3 - > $OUT/nofix.txt 2>&1 <<'EOF'
import contextlib, sys
sys.path.insert(0, "tests/runner")
import strata.split_graphs as sg
sg.collector_held = contextlib.nullcontext
import test_split_graphs as ts
try:
    ts.test_a_graph_dropped_in_a_reference_cycle_does_not_break_a_later_capture()
    print("WITHOUT FIX: passed (the test does not reproduce)")
except BaseException as e:
    print("WITHOUT FIX: failed as expected:", type(e).__name__, str(e)[:300])
EOF
t nofix $?; tail -2 $OUT/nofix.txt | cut -c1-300
timeout -s INT 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_split_graphs.py tests/spec --tb=short > $OUT/tests_a.log 2>&1
t tests_a $?; grep -E "FAILED|ERROR|passed|failed" $OUT/tests_a.log | head -12 | cut -c1-250
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py -k "spec or mtp or evicts or verification" --tb=short > $OUT/tests_b.log 2>&1
t tests_b $?; grep -E "FAILED|ERROR|passed|failed" $OUT/tests_b.log | head -12 | cut -c1-250
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 80 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 \
  --input-len 64 --output-len 128 --concurrency 1,2,4,8 --repeats 1 --speculative-config "$SPEC" --spec-baseline --output $OUT/spec.json > $OUT/spec.log 2>&1
t spec $?; grep -E "tok/s" $OUT/spec.log | tail -8 | cut -c1-200
timeout -s INT 60 python3 -m pytest -q -m gpu -p no:cacheprovider $(cat $REPO/.base/br_last.txt) --tb=short > $OUT/br_last.log 2>&1
t br_last $?; grep -E "FAILED|ERROR|passed|failed" $OUT/br_last.log | head -12 | cut -c1-250
R=$(( 570 - ($(date +%s)-S) ))
timeout -s INT $R python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py -k "not (spec or mtp or evicts or verification)" --tb=short > $OUT/tests_c.log 2>&1
t tests_c $?; grep -E "FAILED|ERROR|passed|failed" $OUT/tests_c.log | head -12 | cut -c1-250
