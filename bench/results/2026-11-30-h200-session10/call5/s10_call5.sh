# session 10, call 5: Triton argmax: tests; launch-width sweep (in-process); single-stream x2 and c1/8/16 decode on the final code
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== bench c1 x2"; for i in 1 2; do timeout 55 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$i.json > $OUT/bench_c1_$i.log 2>&1; echo rc=$?; done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
echo "== tests"; timeout 80 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py tests/sample tests/spec tests/engine/test_async_scheduling.py -k "argmax or sampl or spec or verify or async or greedy" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -8
echo "== tune"; TAG=5 timeout 130 python3 .devscripts/s10_tune.py "$(cat .devscripts/s10_variants5.json)" 2 > $OUT/tune5.log 2>&1; echo rc=$?
tail -12 $OUT/tune5.log
echo "== decode c1/8/16"; timeout 65 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -4
