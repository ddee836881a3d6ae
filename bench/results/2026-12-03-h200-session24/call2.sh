# Device call: the norm-fused activation rounding and the joined same-type segments (HEAD) against the commit
# before them (.base/prev.tar: `git archive d4d0cc6 -o .base/prev.tar`), on issue 23's 30B Q4_K_M command, arms
# alternated in one machine start; then the GPU tests of the packed paths. carry [".whl", ".base"].
source tools/gpu_ab/device_setup.sh
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
for arm in prev new prev new; do
  if [ $arm = prev ]; then D=/tmp/prev; else D=/tmp/src; fi
  [ -f $OUT/q4km_$arm.json ] && suffix=_2 || suffix=
  (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 \
    --output $OUT/q4km_$arm$suffix.json > $OUT/q4km_$arm$suffix.log 2>&1)
  echo "== $arm rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4km_$arm$suffix.log | tail -3 | cut -c1-120
  [ $(( $(date +%s)-S )) -gt 330 ] && break
done
echo "== tests"; timeout -s INT 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py \
  tests/weights/test_packed_gguf.py tests/experts/test_packed_experts.py tests/kernels/test_packed_gemv.py > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8 | cut -c1-300
