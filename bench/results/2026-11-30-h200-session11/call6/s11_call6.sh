# session 11, call 6: short contexts as one attention split (no merge): tests; sweep at 64- and 3000-token prompts; single stream x2
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== tests"; timeout 90 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py -k "paged_attention" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -8
echo "== tune 64"; TAG=6 timeout 150 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants6.json)" 3 > $OUT/tune6.log 2>&1; echo rc=$?
grep FAILED $OUT/tune6.log | head -3; tail -4 $OUT/tune6.log
echo "== tune 3000"; TAG=6L PROMPT_LEN=3000 timeout 90 python3 .devscripts/s10_tune.py "$(cat .devscripts/s11_variants6L.json)" 2 > $OUT/tune6L.log 2>&1; echo rc=$?
tail -2 $OUT/tune6L.log
echo "== bench c1 x2"; for i in 1 2; do timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$i.json > $OUT/bench_c1_$i.log 2>&1; echo rc=$?; done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
