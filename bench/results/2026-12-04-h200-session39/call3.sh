# Session 39, call 3: GPU tests of packed_linear's new dispatch; issue 23's 30B-A3B Q4_K_M at 1 / 8 / 16 streams, this
# commit against the one before it (.base/prev.tar), alternated twice; issue 29's Q4_K_M command at this commit.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
timeout -s INT 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_mmq.py \
  tests/kernels/test_packed_gemv.py tests/weights/test_packed_gguf.py tests/kernels/test_packed_moe.py \
  -k "linear or reordered or step_size" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in a b; do for TREE in /tmp/prev /tmp/src; do
  (cd $TREE && PYTHONPATH=$TREE:/tmp/site:/tmp/hf timeout -s INT 80 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 1,8,16 --repeats 1 --output $OUT/ab_$(basename $TREE)_$R.json) > /tmp/ab.log 2>&1
  echo "== $(basename $TREE) $R t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.log; grep "strata_c" /tmp/ab.log | cut -c1-100 | tee -a $OUT/ab.log
done; done
timeout -s INT 90 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' \
  /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant q4e rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 120 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== issue 29 q4km rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e.log | tail -5 | cut -c1-160
