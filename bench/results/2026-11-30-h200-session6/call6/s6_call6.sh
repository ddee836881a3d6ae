# session 6, call 6: routing kernel with unrolled partial loads and one-reduction top-k picks
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== routing tests"; timeout 100 python3 -m pytest -q -x -m gpu tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -k "route or moe_block or softmax or fused_routing or programmatic or on_off" -p no:cacheprovider > $OUT/route_tests.log 2>&1
rc=$?; grep -v "^  " $OUT/route_tests.log | tail -8; [ $rc = 0 ] || exit 1
echo "== route bench"; timeout 40 python3 .devscripts/route_bench.py 2>&1 | grep -v Warn | tee $OUT/route_bench.log
echo "== decode"; timeout 100 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -4
echo "== synthetic 2.0 c4,c8"; timeout 90 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 96 --concurrency 4,8 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic20_c4c8.json 2>&1 | $F | tail -5
