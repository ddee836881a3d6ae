# Session 42, call 6 (run inline, warm machine after call 5, /tmp/q4km.gguf still there): three more offload arms.
source tools/gpu_ab/device_setup.sh; S=$(date +%s); ls -la /tmp/q4km.gguf || timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
OFF="--device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 --repeats 2"
for ARM in "25% static 0.5" "25% static 0.25" "50% uniform 0.25"; do set -- $ARM; NAME=off${1%\%}_$2_zc$3
timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF --expert-cache $1 --expert-split $2 --zero-copy-frac $3 --output $OUT/$NAME.json > $OUT/$NAME.log 2>&1
echo "== $NAME rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/$NAME.log | cut -c1-160)"; done
