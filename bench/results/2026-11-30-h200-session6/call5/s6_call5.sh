# session 6, call 5: route tail sized to the step's tokens; MTP on qwen3-next with everything
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== route tests"; timeout 60 python3 -m pytest -q -x -m gpu tests/kernels/test_fused_ops.py -k "route or moe_block" -p no:cacheprovider > $OUT/route_tests.log 2>&1
rc=$?; grep -v "^  " $OUT/route_tests.log | tail -8; [ $rc = 0 ] || exit 1
echo "== decode c1"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1.json 2>&1 | $F | tail -2
echo "== mtp qwen3-next"; timeout 290 $S offline 'random:qwen3-next-80b-a3b?num_hidden_layers=24' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"mtp","num_speculative_tokens":3}' --spec-baseline --output $OUT/mtp_next.json 2>&1 | $F | tail -13
