# session 12, call 5: one-token gate/up on the CUDA cores (sweep, keep if >= 3 us faster), down-sum with summed block weights; GPU suite and c1 on the kept code
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== one-token kernel tests"; timeout 100 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py -k "one_token or fused_moe" -p no:cacheprovider > $OUT/tests_one_token.log 2>&1; T=$?; echo "rc=$T"
grep -v "^  \|^$" $OUT/tests_one_token.log | grep "FAILED\|passed\|failed\|Error" | tail -6
echo "== tune 64"; TAG=5 timeout 130 python3 .devscripts/s10_tune.py "$(cat .devscripts/s12_variants5.json)" 3 > $OUT/tune5.log 2>&1; echo rc=$?
grep FAILED $OUT/tune5.log | head -3; grep "wall med\|_gate_up_one\|_down_sum" $OUT/tune5.log
python3 .devscripts/s12_pick5.py $T
echo "== GPU suite"; timeout 260 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec tests/model -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | grep "FAILED\|passed\|failed\|Error" | tail -8
echo "== bench c1"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1.json > $OUT/bench_c1.log 2>&1; echo rc=$?
python3 -c "
import json
d=json.load(open('$OUT/decode_c1.json')); a=d['results']['strata_c1']
print('c1', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"
