# Session 27, call 2 (carry [".whl", ".base"], .base = git archive of the commit named in .base/COMMIT): issue 26's
# 24 GiB forced-window bench, the ring's copies now queued after the step's input uploads, with (A) the offloaded
# MoE layers' transfers made by kernels and the ring by copy engines, (B) the ring by 16 gather programs and the
# transfers by engines; then the GPU tests; then B if time is left.
source tools/gpu_ab/device_setup.sh
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136 --repeats 1"
W="--gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072"
arm() {  # $1 kv dtype, $2 ring's gather programs (0: engines), $3 exchange by kernels (1/0), $4 time limit
N=long_24g_$1_p$2_x$3
echo "== 24GiB window 16K kv=$1 copy_programs=$2 sm_exchange=$3 t=$(( $(date +%s)-S ))"
timeout -s INT $4 python3 -c "import sys; import strata.runner.kv_staging as k; k.HostKVStaging.copy_programs = int(sys.argv.pop(1)); k.HostKVStaging.sm_exchange = bool(int(sys.argv.pop(1))); from strata.cli.main import main; sys.exit(main())" $2 $3 bench offline "$M" --device cuda $LC $W --kv-cache-dtype ${1/bfloat16/auto} --kv-staging-layers 1 --output $OUT/$N.json > $OUT/$N.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror|Interrupt|File" $OUT/$N.log | tail -6 | cut -c1-250
}
arm fp8 0 1 160
echo "== tests t=$(( $(date +%s)-S ))"; timeout -s INT 170 python3 -m pytest -v -m gpu -p no:cacheprovider tests/experts/test_expert_offload_gpu.py \
  tests/runner/test_cuda_graphs.py --tb=short -k "staging or exchange or staged" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | grep -v PASSED | head -20 | cut -c1-250
LEFT=$(( 440 - ($(date +%s)-S) )); [ $LEFT -gt 110 ] && arm fp8 16 0 $LEFT
