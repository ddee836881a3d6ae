# session 8, call 3: code 5dfadb4: GPU suite, decode c1/8/16 (+ a second c1), synthetic 2.0 c1-32
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== gpu suite"; timeout 280 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | grep "FAILED\|passed\|failed" | tail -8
echo "== decode"; timeout 100 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -3
timeout 50 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1.json > /dev/null 2>&1
for f in $OUT/decode*.json; do python3 -c "
import json
d=json.load(open('$f'))
for k, a in d['results'].items(): print('$(basename $f)', k, round(a['median_output_tok_s'],1), 'step', round(a.get('median_decode_step_ms') or 0,4), 'frac', round(a.get('median_bandwidth_fraction') or 0,4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
echo "== synthetic 2.0 c1-32"; timeout 200 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic20.json 2>&1 | $F | tail -14
