# Session 53 (~5 minutes, after next_call57.sh): a file users have, on the GPU for the first time: issue 23's
# 30B-A3B 24L written as MXFP4_MOE (`strata quantize --scheme mxfp4_moe`: experts MXFP4, the rest Q8_0; its experts
# take the 8-bit pairs up to 4 pairs an expert, then the float grouped kernels) against the same shape at Q4_K_M,
# issue 23's bench (c1 / c8 / c16, 512-token prefill), one run each; the two GPU tests of a packed MXFP4 model.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
for SCHEME in mxfp4_moe q4_k_m; do
  timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/$SCHEME.gguf \
    --scheme $SCHEME --device cuda > $OUT/quant_$SCHEME.log 2>&1; echo "== quant $SCHEME rc=$? t=$(( $(date +%s)-S ))"
  timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/$SCHEME.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
    --output $OUT/$SCHEME.json > $OUT/$SCHEME.log 2>&1
  echo "== bench $SCHEME rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/$SCHEME.log | tail -4 | cut -c1-140
done
timeout -s INT 100 python3 -m pytest -q -m gpu tests/experts/test_packed_experts.py -k "cuda" -p no:cacheprovider \
  > $OUT/tests.log 2>&1; echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/tests.log | cut -c1-300
