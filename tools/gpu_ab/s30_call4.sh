# Session 30, call 4: QSA past its budget on the device (the block-score kernel, the paged attention kernel's
# block choice, the sparse graph variant) under test; the packed LM head's 2-8 row tiling in issue 29's Q4_K_M
# command; Qwen4-Exp 4 layers decoding one stream at an 8K context before (8e3ca29, .base, from /tmp/src) and
# after (the carried tree).
R=$PWD
source tools/gpu_ab/device_setup.sh
cd $R
export PYTHONPATH=$R:/tmp/site:/tmp/hf STRATA_COMMIT=qsa-device
S=$(date +%s)
timeout -s INT 230 python3 -m pytest -v -m gpu -p no:cacheprovider tests/kernels/test_qsa_scores.py \
  tests/kernels/test_kernels.py tests/runner/test_cuda_graphs.py --tb=short -k "chosen_blocks or qsa or \
  paged_attention_matches_ref or qwen4_exp or greedy_matches_hf_through" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|passed|failed|Error" $OUT/tests.log | head -20 | cut -c1-220
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== issue 29 Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4e.log | tail -3 | cut -c1-160
LONG="bench offline random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none --device cuda --concurrency 1 --num-prompts 1 \
  --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 16384 --repeats 1 --decode-contexts 8192"
timeout -s INT 90 python3 -m strata.cli.main $LONG --output $OUT/long_new.json > $OUT/long_new.log 2>&1
echo "== long new rc=$? t=$(( $(date +%s)-S ))"; grep -iE "context|tok/s" $OUT/long_new.log | tail -3 | cut -c1-200
cd /tmp/src && export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf STRATA_COMMIT=$(cat $R/.base/COMMIT)
timeout -s INT 90 python3 -m strata.cli.main $LONG --output $OUT/long_old.json > $OUT/long_old.log 2>&1
echo "== long old rc=$? t=$(( $(date +%s)-S ))"; grep -iE "context|tok/s" $OUT/long_old.log | tail -3 | cut -c1-200
