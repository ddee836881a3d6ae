# Session 50, call 4 (~5 minutes): the GEMV up to 8 rows (HEAD) against HEAD~1 (dequantize + GEMM from 5 rows): its GPU
# tests, then issue 23's c1 / c8 / c16 in two alternated rounds. Build the archives first:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT && git archive HEAD~1 -o .base/old.tar
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 120 python3 -m pytest -q -x -m gpu tests/kernels/test_packed_q8.py tests/kernels/test_packed_gemv.py \
  -k "gemv or linear" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests.log
mkdir -p /tmp/old && tar -xf $OLDPWD/.base/old.tar -C /tmp/old
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2; do for T in old src; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 1,8,16 --repeats 1 --output $OUT/c_${T}_$R.json > /tmp/c_$T.log 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt; grep -E "strata_c" /tmp/c_$T.log | cut -c1-120 >> $OUT/ab.txt
done; done
cat $OUT/ab.txt
