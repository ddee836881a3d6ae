# Session 20's second device call: the tests call 1 failed or did not reach, the 24 GiB forced window
# after the DMA fix of long chunks' host reads, and issue 28's speculation sweep.
source tools/gpu_ab/device_setup.sh
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== tests"; timeout -s INT 170 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py \
  tests/experts/test_expert_offload_gpu.py tests/kernels/test_fused_ops.py --tb=short \
  -k "beside_verification and mtp or stream or split_graphs or skinny_mlp" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | grep -v "PASSED" | head -20 | cut -c1-250
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136"
echo "== 24GiB window 16K"; timeout -s INT 220 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --repeats 1 --gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072 --output $OUT/long_24g_res16k.json > $OUT/long_24g_res16k.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror|Interrupt|File" $OUT/long_24g_res16k.log | tail -8 | cut -c1-250
echo "== spec sweep"; timeout -s INT 150 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,4,16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_sweep.json > $OUT/spec_sweep.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "speedup|tok/s|rror" $OUT/spec_sweep.log | tail -14 | cut -c1-250
