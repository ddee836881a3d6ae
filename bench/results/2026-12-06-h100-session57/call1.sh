# Session 55 (~8 minutes): eager steps of prompts beside verification windows on Gated DeltaNet models now run the
# Triton recurrence twice (windows keeping per-token states, then the prompt chunks) instead of the torch path
# (STRATA_TORCH_MIXED_GDN=1 restores it). Its GPU tests (the layer against the torch path with a 21-token prompt after
# the windows; every GDN kernel test; test_cuda_graphs' prompts beside windows, whose MTP case parted three requests
# on an H100 in session 55; tests/spec on the GPU), then mixed_step_diag.py (which eager runs part from plain
# decoding, float32 and bf16, with and without the switch), then issue 28's speculation command at 4 streams with
# the switch off / on.
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
run_tests gdn 90 tests/kernels/test_kernels.py -k "gdn or conv1d"
run_tests graphs_windows 120 -s tests/runner/test_cuda_graphs.py -k "verification_windows or token_identity"
run_tests spec 150 tests/spec
DIAG="float32:mtp,mtp_torch_gdn,plain_cpu;bfloat16:mtp,mtp_torch_gdn,mtp_graphs,plain_cpu" timeout -s INT 150 \
  python3 mixed_step_diag.py > $OUT/diag.txt 2>&1
echo "== diag rc=$? t=$(( $(date +%s)-S ))"; grep -v "Writing\|Warn" $OUT/diag.txt | tail -24 | cut -c1-300
for F in 0 1; do
  STRATA_TORCH_MIXED_GDN=$F timeout -s INT 100 python3 -m strata.cli.main bench offline \
    'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 \
    --output-len 128 --concurrency 4 --repeats 1 --spec-baseline \
    --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' > /tmp/s.log 2>&1
  echo "== spec c4 torch_mixed_gdn=$F rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/bench.txt
  grep -E "strata_c4|x none|speedup" /tmp/s.log | cut -c1-160 | tee -a $OUT/bench.txt
done
