# session 7, call 6: final code (skinny_linear without the pre-wait load): its tests, the graph tests, decode c1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== tests"; timeout 240 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | tail -4
echo "== decode c1"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1.json 2>&1 | $F | tail -1
