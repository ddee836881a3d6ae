# session 12, call 4: one-token down-sum kernel with the duplicate-expert pass: full GPU suite, sweep, c1 x3, c1/8/16
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== GPU suite"; timeout 300 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec tests/model -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | grep "FAILED\|passed\|failed\|Error" | tail -10
echo "== tune 64"; TAG=4 timeout 150 python3 .devscripts/s10_tune.py "$(cat .devscripts/s12_variants4.json)" 3 > $OUT/tune4.log 2>&1; echo rc=$?
grep FAILED $OUT/tune4.log | head -3; grep "wall med\|_down_sum" $OUT/tune4.log
echo "== bench c1 x3"; for i in 1 2 3; do timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$i.json > $OUT/bench_c1_$i.log 2>&1; echo rc=$?; done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
echo "== decode c1/8/16"; timeout 80 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -4
