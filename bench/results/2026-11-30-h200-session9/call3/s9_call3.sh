# session 9, call 3: code 2301029 + the prompt-count fix (committed in 4b77879): full GPU suite, synthetic 3.0 c1-32, mtp qwen3-next c1-32
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== gpu suite"; timeout 290 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | grep "FAILED\|passed\|failed" | tail -8
echo "== synthetic 3.0 c1-32"; timeout 130 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic30.json > $OUT/spec30.log 2>&1; echo rc=$?
grep -i "captured\|tok/s" $OUT/spec30.log | $F | tail -14
echo "== mtp qwen3-next c1-32"; timeout 150 $S offline 'random:qwen3-next-80b-a3b?num_hidden_layers=24' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 32 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"mtp","num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_mtp.json > $OUT/mtp.log 2>&1; echo rc=$?
grep -i "captured\|tok/s" $OUT/mtp.log | $F | tail -14
