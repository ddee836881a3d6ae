# Session 62, call 2 (~9 minutes, any card): the roll-back of verification windows on CUDA (d877521: only slots that
# rejected a draft, one launch a state tensor, read straight from the recorded rows; the GDN kernel no longer writes
# a window's last per-token state) against 4cc4a7b. Issue 29's speculation at 4 streams (two repeats)
# from each tree, then issue 28's at 4 streams from each, then the change's GPU tests in the time left.
# Build the archives first: git archive --format=tar.gz HEAD -o .base/src.tar; git archive ... 4cc4a7b -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
spec_ab() {  # NAME MODEL REPEATS SECONDS
  for T in src prev; do
    (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT $4 python3 -m strata.cli.main bench offline "$2" \
      --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats $3 \
      --speculative-config "$SPEC" --spec-baseline --output $OUT/$1_$T.json > /tmp/$1_$T.log 2>&1)
    rc=$?; echo "== $1 $T rc=$rc t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; [ $rc = 0 ] || tail -4 /tmp/$1_$T.log | cut -c1-300 >> $OUT/ab.txt; grep -E "strata_" /tmp/$1_$T.log | cut -c1-200 | tee -a $OUT/ab.txt
  done
}
spec_ab q4e 'random:qwen4exp-125b?num_hidden_layers=4' 2 150
spec_ab next 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 2 80
run_tests rollback $(( 570 - ($(date +%s) - S) )) tests/kernels/test_state_rollback.py "tests/kernels/test_kernels.py::test_gdn_recurrent_matches_ref" \
  tests/runner/test_cuda_graphs.py -k "rollback or gdn_recurrent or token_identity or qwen4_exp" -x
