# session 8, call 1: route tail in registers (+ optional preload) A/B, MoE tile sweep, GPU suite, profile
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== route bench"; timeout 60 python3 .devscripts/route_bench.py > $OUT/route_bench.log 2>&1; echo "rc=$?"; cat $OUT/route_bench.log | grep -v arn
for arm in new old preload new; do
  case $arm in old) E="STRATA_OLD_ROUTE_TAIL=1";; new) E="";; preload) E="STRATA_ROUTE_PRELOAD=1";; esac
  env $E timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$arm.$RANDOM.json > /dev/null 2>&1
done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json,sys
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
echo "== gpu suite"; timeout 280 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | tail -8
echo "== profile"; STRATA_NO_PDL=1 timeout 60 python3 .devscripts/profile_graph.py "$M" graph > $OUT/profile_graph_nopdl.log 2>&1; head -16 $OUT/profile_graph_nopdl.log
echo "== moe tile sweep"; timeout 90 python3 .devscripts/moe_tile_sweep.py 1 > $OUT/moe_tile_sweep_t1.log 2>&1; echo "rc=$?"; grep -v arn $OUT/moe_tile_sweep_t1.log
