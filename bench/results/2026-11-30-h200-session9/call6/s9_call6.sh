# session 9, call 6: code a16e400: hybrid prompt graphs (GDN kernels stop at real lengths), equal fresh prompts as one SDPA batch: GPU tests, mtp qwen3-next c1/16
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== gpu tests"; timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py tests/runner/test_cuda_graphs.py -k "gdn or conv or mixed_step or padded or fresh_prompts or on_off_token_identity or float32_greedy" -p no:cacheprovider > $OUT/gpu_tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_tests.log | grep "FAILED\|passed\|failed\|Error" | tail -12
echo "== mtp qwen3-next c1,16"; timeout 100 $S offline 'random:qwen3-next-80b-a3b?num_hidden_layers=24' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,16 --repeats 1 --speculative-config '{"method":"mtp","num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_mtp.json > $OUT/mtp.log 2>&1; echo rc=$?
grep -i "captured\|tok/s" $OUT/mtp.log | $F | tail -6
