# KV staging A/B at the 24 GiB plan (issue 26): the copy-engine microbenchmark, then the forced-window bench
# with the ring's copies in chunks (default 4 MB) at R = 1 and 2 (fp8), and R = 2 (bf16). Run after
# device_setup.sh (carry [".whl", ".base"]); CHUNK_MB=0 means one copy a run (the behaviour before chunks).
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== copy_hol"; timeout -s INT 60 python3 copy_hol.py 2>&1 | tee $OUT/copy_hol.txt
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136 --repeats 1"
W="--gpu-memory-limit-mib 24576 --kv-resident-tokens 16384 --decode-contexts 4096,131072"
for ARM in "${@}"; do set -- $ARM
N=long_24g_$1_staged$2_chunk$3
echo "== 24GiB window 16K kv=$1 staging=$2 chunk=$3 MB"
timeout -s INT 170 python3 -c "import sys; import strata.runner.kv_staging as k; k.HostKVStaging.chunk_bytes = int(sys.argv.pop(1)) << 20 or 1 << 40; from strata.cli.main import main; sys.exit(main())" $3 bench offline "$M" --device cuda $LC $W --kv-cache-dtype ${1/bfloat16/auto} --kv-staging-layers $2 --output $OUT/$N.json > $OUT/$N.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror|Interrupt|File" $OUT/$N.log | tail -6 | cut -c1-250
done
