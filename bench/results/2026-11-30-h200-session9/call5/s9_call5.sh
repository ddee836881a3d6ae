# session 9, call 5: code d13dab6: GPU spec tests, mtp qwen3-next c1-32 (one run per arm, 64 output tokens)
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== gpu spec+engine"; timeout 150 python3 -m pytest -q -m gpu tests/spec tests/engine -p no:cacheprovider > $OUT/gpu_spec.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_spec.log | grep "FAILED\|passed\|failed" | tail -8
echo "== mtp qwen3-next c1-32"; timeout 200 $S offline 'random:qwen3-next-80b-a3b?num_hidden_layers=24' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"mtp","num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_mtp.json > $OUT/mtp.log 2>&1; echo rc=$?
grep -i "captured\|tok/s" $OUT/mtp.log | $F | tail -14
