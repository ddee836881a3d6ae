# session 8, call 2: route tail fix (>= 16 rows), skinny streaming sweep, decode A/B (preload, MoE tile, streaming GEMV), tests
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== route bench"; timeout 60 python3 .devscripts/route_bench.py > $OUT/route_bench.log 2>&1; echo "rc=$?"; grep "^E=" $OUT/route_bench.log; grep -m3 "rror" $OUT/route_bench.log
echo "== skinny stream"; timeout 120 python3 .devscripts/skinny_stream_bench.py $OUT/skinny_best.txt > $OUT/skinny_stream.log 2>&1; echo "rc=$?"; grep -v arn $OUT/skinny_stream.log | grep -v "^  " 
SK=$(cat $OUT/skinny_best.txt 2>/dev/null || echo 2,1024,4,2); echo "skinny best $SK"
for arm in pre all pre moe sk all; do
  case $arm in pre) E="STRATA_ROUTE_PRELOAD=1";; moe) E="STRATA_ROUTE_PRELOAD=1 STRATA_X_MOE_TILE=64,256,3";; sk) E="STRATA_ROUTE_PRELOAD=1 STRATA_X_SKINNY=$SK";; all) E="STRATA_ROUTE_PRELOAD=1 STRATA_X_MOE_TILE=64,256,3 STRATA_X_SKINNY=$SK";; esac
  env $E timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$arm.$RANDOM.json > /dev/null 2>&1
done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json,sys
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
echo "== tests"; timeout 200 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py tests/engine/test_async_scheduling.py -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed" | tail -8
