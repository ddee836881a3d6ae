# Session 25's first device call (prepared in session 24): `bash tools/gpu_ab/next_call1.sh` with carry
# [".whl", ".base"] after `git archive HEAD -o .base/src.tar; git archive 0074833 -o .base/prev.tar;
# git rev-parse --short HEAD > .base/COMMIT` (the wheels: device_setup.sh; see session 22's list).
# 1. the GPU tests not yet run on a GPU: the pairs at 48 tokens, keep_rounding;
# 2. issue 29's Qwen4-Exp Q4_K_M command, HEAD (8-bit pairs up to 512 pairs, keep_rounding) against 0074833
#    (pairs up to 128: 16 streams took the float grouped kernels), alternated;
# 3. issue 23's 30B Q4_K_M command at HEAD (unchanged at 16 streams and below: a check).
source tools/gpu_ab/device_setup.sh
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
S=$(date +%s)
echo "== tests"; timeout -s INT 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py \
  tests/weights/test_packed_gguf.py > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -6 | cut -c1-300
bench() {  # arm model tag input_len suffix
  if [ $1 = prev ]; then D=/tmp/prev; else D=/tmp/src; fi
  (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline $2 \
    --device cuda --max-model-len 4096 --num-prompts 16 --input-len $4 --output-len 128 --repeats 1 --concurrency 1,8,16 \
    --output $OUT/$3_$1$5.json > $OUT/$3_$1$5.log 2>&1)
  echo "== $3 $1$5 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/$3_$1$5.log | tail -3 | cut -c1-110
}
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
bench prev /tmp/q4e.gguf q4e 128; bench new /tmp/q4e.gguf q4e 128; bench prev /tmp/q4e.gguf q4e 128 _2; bench new /tmp/q4e.gguf q4e 128 _2
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
bench new /tmp/q4km.gguf q4km 64
