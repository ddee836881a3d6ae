# session 9, call 2: code 2301029: grouped prompt graphs + cache holding the whole ladder: tests, synthetic 2.0 c1-32 with step log, decode c1/8/16
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== tests"; timeout 200 python3 -m pytest -q -m gpu tests/runner/test_cuda_graphs.py tests/engine/test_async_scheduling.py -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -8
echo "== synthetic 2.0 c1-32"; timeout 150 python3 .devscripts/spec_steps.py $OUT/steps20.jsonl -- bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic20.json > $OUT/spec20.log 2>&1; echo rc=$?
grep -i "captured\|tok/s" $OUT/spec20.log | $F | tail -16
python3 .devscripts/analyze_steps.py $OUT/steps20.jsonl | grep -A4 "max_slots 16\|max_slots 32"
echo "== decode"; timeout 80 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -3
