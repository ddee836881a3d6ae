# Session 27, call 1 (carry [".whl", ".base"], .base = git archive of 74b9f83): the copy-overlap microbenchmark,
# issue 26's 24 GiB forced-window bench with the ring filled by gather kernels (fp8 KV, R = 1), the GPU tests of
# the kernels and of staging, then the copy-engine arm if time is left.
source tools/gpu_ab/device_setup.sh
cp bench/results/2026-12-03-h200-session27/copy_overlap.py .
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== copy_overlap"; timeout -s INT 100 python3 copy_overlap.py 2>&1 | tee $OUT/copy_overlap.txt
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136 --repeats 1"
W="--gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072"
arm() {  # $1 kv dtype, $2 copy programs (0: engine)
N=long_24g_$1_p$2
echo "== 24GiB window 16K kv=$1 copy_programs=$2 t=$(( $(date +%s)-S ))"
timeout -s INT $3 python3 -c "import sys; import strata.runner.kv_staging as k; k.HostKVStaging.copy_programs = int(sys.argv.pop(1)); from strata.cli.main import main; sys.exit(main())" $2 bench offline "$M" --device cuda $LC $W --kv-cache-dtype ${1/bfloat16/auto} --kv-staging-layers 1 --output $OUT/$N.json > $OUT/$N.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror|Interrupt|File" $OUT/$N.log | tail -6 | cut -c1-250
}
arm fp8 32 170
echo "== tests t=$(( $(date +%s)-S ))"; timeout -s INT 170 python3 -m pytest -v -m gpu -p no:cacheprovider tests/kernels/test_kernels.py tests/runner/test_cuda_graphs.py \
  --tb=short -k "gather or staged" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | grep -v PASSED | head -20 | cut -c1-250
LEFT=$(( 575 - ($(date +%s)-S) )); [ $LEFT -gt 100 ] && arm fp8 0 $LEFT
