# Prepared in session 73 (~9 minutes; run under a 600 s limit). First, on either card's host: quant_moe of the
# 30B-A3B's experts at 8 / 16 threads, the AVX2 table against the AVX-512 one (session 73's 512-bit K-quants;
# 7-24 % less on the 2-core VM, the same bits), `qmoe_scale.py`. On an H200: issue 23's c1 / c8 / c16 and 512-token
# prefill (targets 740 / 2,200 / 2,200 / 18,000; session 66: 730.2 / 2,181.2 / 2,901.0 / 20,615.1), then the offload
# command at 25 % (150; 144.7) with the AVX-512 kernels, with the AVX2 ones, and again, then c1 twice more. On an
# H100: session 72's GPU tests and Qwen4-Exp Q4_K_M c1 with its mixers dequantized on CUDA against packed
# (next_call115.sh), then the offload A/B.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
lscpu > $OUT/lscpu.txt
timeout -k 5 -s INT 60 python3 qmoe_scale.py threads=8,16 isa=avx2,avx512 > $OUT/qmoe_scale.txt 2>&1
echo "== qmoe_scale rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/qmoe_scale.txt
if nvidia-smi -L | grep -q H200; then
  quantize_q4km
  issue23 150
  [ $(left 420) -gt 80 ] && offload25 off25_avx512 80
  [ $(left 500) -gt 70 ] && STRATA_CPU_QUANT_ISA=avx2 offload25 off25_avx2 80
  [ $(left 570) -gt 70 ] && offload25 off25_avx512_2 80
  [ $(left 570) -gt 40 ] && timeout -k 5 -s INT $(left 570) python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1 \
    --repeats 2 --output $OUT/q4km_c1.json > $OUT/q4km_c1.log 2>&1
  echo "== c1 again rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4km_c1.log | cut -c1-170
  exit 0
fi
run_tests session72 120 tests/weights/test_qwen4_exp_gguf.py tests/kernels/test_sm_gather.py \
  tests/experts/test_expert_offload_gpu.py::test_host_copy_is_pinned_for_asynchronous_copies
timeout -k 5 -s INT 90 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' \
  /tmp/exp4.gguf --scheme q4_k_m --device cuda > $OUT/quant.log 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
tail -3 $OUT/quant.log
for ARM in dense packed; do
  END=330; [ $ARM = packed ] && END=420
  [ $(left $END) -gt 60 ] && (export STRATA_DENSE_MIXERS=$([ $ARM = packed ] && echo 0 || echo 1)
    timeout -k 5 -s INT $(left $END) python3 -m strata.cli.main bench offline \
    /tmp/exp4.gguf --device cuda --max-model-len 4096 --num-prompts 8 --input-len 128 --output-len 128 \
    --concurrency 1 --repeats 2 --output $OUT/exp4_c1_$ARM.json > $OUT/exp4_c1_$ARM.log 2>&1
    echo "== exp4 c1 $ARM rc=$? t=$(( $(date +%s)-S ))"); grep -E "strata_c|loaded" $OUT/exp4_c1_$ARM.log | cut -c1-170
done
rm -f /tmp/exp4.gguf
[ $(left 560) -gt 100 ] && quantize_q4km && [ $(left 560) -gt 80 ] && offload25 off25_avx512 $(( $(left 560) / 2 ))
[ $(left 570) -gt 40 ] && STRATA_CPU_QUANT_ISA=avx2 offload25 off25_avx2 $(left 570)
exit 0
