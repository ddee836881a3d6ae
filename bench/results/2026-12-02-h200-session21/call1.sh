# Session 21's first device call (prepared in session 20): `bash tools/gpu_ab/next_call1.sh` with carry
# [".whl", ".base"] after building the archive (device_setup.sh says how). The staged host tier
# (--kv-staging-layers) has CPU tests only: its GPU graph test first, then issue 26's 24 GiB forced-window
# bench with and without staging (fp8 KV, then bf16), same process order each time.
source tools/gpu_ab/device_setup.sh
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== tests"; timeout -s INT 150 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py \
  --tb=short -k "staged_host_kv" > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/tests.log | grep -v "PASSED" | head -20 | cut -c1-250
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136 --repeats 1"
W="--gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072"
for ARM in "fp8 1" "bfloat16 1"; do set -- $ARM
echo "== 24GiB window 16K kv=$1 staging=$2"; timeout -s INT 170 python3 -m strata.cli.main bench offline "$M" --device cuda $LC $W --kv-cache-dtype ${1/bfloat16/auto} --kv-staging-layers $2 --output $OUT/long_24g_$1_staged$2.json > $OUT/long_24g_$1_staged$2.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror|Interrupt|File|staging" $OUT/long_24g_$1_staged$2.log | tail -8 | cut -c1-250
done
