# Session 54 (~9 minutes; at most 8 files come back, so the logs go to two): a warm-up run, then the offload fix
# (`packed_q8.HOST_ONE_TOKEN_*`) at 25 % and 50 % against STRATA_NO_HOST_PAIR_TILINGS=1, two alternated rounds
# (session 54's call 2 had one clean pair: 129.3 against 111.1); the GPU tests not yet run (IQ4 / MXFP4 GEMV, packed_moe,
# the float kernels on MXFP4) in three steps; issue 23's shape at 8 layers as iq3_xxs against q4_k_m (one stream, 8
# streams, 512-token prefill; `strata quantize --scheme iq3_xxs`, new in session 54).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
quantize_q4km
cat /tmp/q4km.gguf > /dev/null
offload() {  # offload SHARE FLAG NAME
  STRATA_NO_HOST_PAIR_TILINGS=$2 timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
    --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache $1 > /tmp/off.log 2>&1
  echo "== $3 share=$1 no_host_tilings=$2 rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt
  grep -E "strata_c1" /tmp/off.log | cut -c1-110 >> $OUT/ab.txt
}
offload 25% 0 warmup
for R in 1 2; do for SHARE in 25% 50%; do for F in 0 1; do offload $SHARE $F r$R; done; done; done
cat $OUT/ab.txt
# the pairs (86 cases), the GEMV and dequantization on IQ4_NL (20) / IQ4_XS (23) / MXFP4 (39) (108), packed_moe (71)
run_tests() {  # run_tests NAME PYTEST_ARGS...
  local name=$1; shift
  timeout -s INT 150 python3 -m pytest -q -m gpu "$@" -p no:cacheprovider > /tmp/t.log 2>&1
  echo "== $name rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/tests.txt
  grep -E "^(FAILED|ERROR)|passed|failed" /tmp/t.log | tail -12 | cut -c1-300 | tee -a $OUT/tests.txt
}
run_tests pairs tests/kernels/test_packed_q8.py -k pair
run_tests iq4_gemv tests/kernels/test_packed_q8.py tests/kernels/test_packed_gemv.py \
  -k "(gemv or dequant) and (-20- or -23- or -39- or -20] or -23] or -39])"
run_tests packed_moe tests/kernels/test_packed_moe.py
for SCHEME in q4_k_m iq3_xxs; do
  timeout -s INT 150 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=8' /tmp/$SCHEME.gguf \
    --scheme $SCHEME --device cuda > /tmp/q.log 2>&1; echo "== quant $SCHEME rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/iq.txt
  tail -2 /tmp/q.log | cut -c1-300 >> $OUT/iq.txt
  timeout -s INT 120 python3 -m strata.cli.main bench offline /tmp/$SCHEME.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 --prefill-lens 512 > /tmp/b.log 2>&1
  echo "== bench $SCHEME rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/iq.txt
  grep -E "strata_c|prefill" /tmp/b.log | cut -c1-140 | tee -a $OUT/iq.txt
done
