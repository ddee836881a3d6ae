# session 7, call 3: skinny_linear (no prefetch): configs vs cuBLAS, then decode c1 A/B with the best M=1 config
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== skinny bench"; timeout 200 python3 .devscripts/skinny_bench.py $OUT/best.txt 2>&1 | grep -v Warn > $OUT/skinny_bench.log; grep -v "^  " $OUT/skinny_bench.log | tail -12
B=$(cat $OUT/best.txt); echo "best $B"
for arm in cublas skinny cublas skinny; do
  case $arm in cublas) E="STRATA_NO_SKINNY_LINEAR=1";; skinny) E="STRATA_X_SKINNY_M1=$B";; esac
  echo "== decode c1 $arm"; env $E timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$arm.$RANDOM.json 2>&1 | $F | tail -1
done
