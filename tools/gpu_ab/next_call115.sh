# Prepared in session 72 (~7 minutes; run under a 450 s limit): the GPU tests of session 72's changes (a GGUF PLE
# table copied off its map and read in place; transfer.host_copy's pinning; a Q4_K_M Qwen4-Exp whose hyper-connection
# mixers load packed and are dequantized on CUDA, loader._dequantize_dense_on_gpu), then session 61's Q4_K_M
# Qwen4-Exp 4L without PLE at one stream against issue 29's 1,122 tok/s (session 61 on an H100: 1,155.4), which now
# loads its mixers through that dequantization; then the same with STRATA_DENSE_MIXERS=0 (the mixers packed on the GPU
# too: ~0.9 GB less VRAM on the 125B, more launches a step), the speed that costs.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
run_tests session72 120 tests/weights/test_qwen4_exp_gguf.py tests/kernels/test_sm_gather.py \
  tests/experts/test_expert_offload_gpu.py::test_host_copy_is_pinned_for_asynchronous_copies
timeout -k 5 -s INT 90 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' \
  /tmp/exp4.gguf --scheme q4_k_m --device cuda > $OUT/quant.log 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/quant.log
for ARM in dense packed; do
  END=300; [ $ARM = packed ] && export STRATA_DENSE_MIXERS=0 && END=420
  timeout -k 5 -s INT $(( END - ($(date +%s)-S) )) python3 -m strata.cli.main bench offline \
    /tmp/exp4.gguf --device cuda --max-model-len 4096 --num-prompts 8 --input-len 128 --output-len 128 \
    --concurrency 1 --repeats 2 --output $OUT/exp4_c1_$ARM.json > $OUT/exp4_c1_$ARM.log 2>&1
  echo "== exp4 c1 $ARM rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|loaded" $OUT/exp4_c1_$ARM.log | cut -c1-170
done
