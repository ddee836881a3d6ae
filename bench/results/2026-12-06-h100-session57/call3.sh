# Session 57 (~5-7 minutes; the last two parts only while time allows): the tree with packed_q8_joined on by default and session 57's 5-8-row GEMV tilings
# (next_call66's picks). The GEMV and joined GPU tests (next_call66's 90 s ran out in the 412 GEMV cases: 8 workers
# here); test_cuda_graphs' prompts beside verification windows (next_call64's 120 s stopped after 5 of its cases);
# issue 23's c1 / c8 at this commit; issue 28's speculation command at 4 streams with STRATA_TORCH_MIXED_GDN 0 / 1
# (next_call64's grep kept none of its lines: the whole log now); the 1- and 4-row GEMV over session 56's narrow grid
# (for information: default_config's 1-4-row tilings are the H200's of session 29/30).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
run_tests() {  # run_tests NAME SECONDS PYTEST_ARGS...
  local name=$1 secs=$2; shift 2
  timeout -s INT $secs python3 -m pytest -q -m gpu "$@" -p no:cacheprovider > /tmp/t.log 2>&1
  echo "== $name rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/tests.txt
  grep -E "^(FAILED|ERROR)|^E  |passed|failed" /tmp/t.log | tail -14 | cut -c1-400 | tee -a $OUT/tests.txt
}
run_tests gemv_joined 200 -n 8 tests/kernels/test_packed_q8.py tests/kernels/test_packed_q8_joined.py -k "gemv or joined"
quantize_q4km
timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 --output $OUT/head.json > /tmp/b.log 2>&1
echo "== head rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/b.log | cut -c1-120 | tee -a $OUT/ab.txt
for F in 0 1; do
  STRATA_TORCH_MIXED_GDN=$F timeout -s INT 100 python3 -m strata.cli.main bench offline \
    'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 \
    --output-len 128 --concurrency 4 --repeats 1 --spec-baseline --output $OUT/spec_torch_mixed_gdn$F.json \
    --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' > $OUT/spec$F.log 2>&1
  echo "== spec c4 torch_mixed_gdn=$F rc=$? t=$(( $(date +%s)-S ))"; grep -v "Warn\|Writing" $OUT/spec$F.log | tail -6 | cut -c1-160
done
[ $(( $(date +%s)-S )) -lt 250 ] && run_tests graphs_windows 150 -n 3 tests/runner/test_cuda_graphs.py -k "beside_verification_windows"
[ $(( $(date +%s)-S )) -lt 300 ] && GEMV_GRID=narrow GEMV_ROWS=1,4 timeout -s INT 120 python3 gemv_rows_sweep.py > $OUT/gemv_rows_sweep14.txt 2>&1
echo "== sweep14 rc=$? t=$(( $(date +%s)-S ))"; cut -c1-300 $OUT/gemv_rows_sweep14.txt | tail -10
