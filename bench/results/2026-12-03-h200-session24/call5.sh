# Device call 5: the pairs tiling by token count (HEAD: one token keeps the old one) against call 4's commit db11cae
# 30B Q4_K_M command (issue 23), arms alternated in one machine start. carry [".whl", ".base"].
source tools/gpu_ab/device_setup.sh
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
S=$(date +%s)
bench() {  # arm model tag input_len
  if [ $1 = prev ]; then D=/tmp/prev; else D=/tmp/src; fi
  (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline $2 \
    --device cuda --max-model-len 4096 --num-prompts 16 --input-len $4 --output-len 128 --repeats 1 --concurrency 1,8,16 \
    --output $OUT/$3_$1$5.json > $OUT/$3_$1$5.log 2>&1)
  echo "== $3 $1$5 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/$3_$1$5.log | tail -3 | cut -c1-110
}
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
bench prev /tmp/q4km.gguf q4km 64; bench new /tmp/q4km.gguf q4km 64; bench prev /tmp/q4km.gguf q4km 64 _2; bench new /tmp/q4km.gguf q4km 64 _2
