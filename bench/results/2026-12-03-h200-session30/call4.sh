# Session 30, call 4: QSA past its budget on the device (the block-score kernel, the paged attention kernel's
# block choice, the sparse graph variant) under test; Qwen4-Exp 4 layers decoding one stream at an 8K context before (8e3ca29, .base, from /tmp/src) and
# after (the carried tree).
R=$PWD
source tools/gpu_ab/device_setup.sh
cd $R
export PYTHONPATH=$R:/tmp/site:/tmp/hf STRATA_COMMIT=qsa-device
S=$(date +%s)
timeout -s INT 170 python3 -m pytest -v -m gpu -p no:cacheprovider tests/kernels/test_qsa_scores.py \
  tests/kernels/test_kernels.py tests/runner/test_cuda_graphs.py --tb=short -k "chosen_blocks or qsa or \
  qwen4_exp or greedy_matches_hf_through" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed|Error" $OUT/tests.log | head -20 | cut -c1-220
LONG="bench offline random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none --device cuda --concurrency 1 --num-prompts 1 \
  --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 16384 --repeats 1 --decode-contexts 8192"
timeout -s INT 65 python3 -m strata.cli.main $LONG --output $OUT/long_new.json > $OUT/long_new.log 2>&1
echo "== long new rc=$? t=$(( $(date +%s)-S ))"; grep -iE "context|tok/s" $OUT/long_new.log | tail -3 | cut -c1-200
cd /tmp/src && export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf STRATA_COMMIT=$(cat $R/.base/COMMIT)
timeout -s INT 65 python3 -m strata.cli.main $LONG --output $OUT/long_old.json > $OUT/long_old.log 2>&1
echo "== long old rc=$? t=$(( $(date +%s)-S ))"; grep -iE "context|tok/s" $OUT/long_old.log | tail -3 | cut -c1-200
