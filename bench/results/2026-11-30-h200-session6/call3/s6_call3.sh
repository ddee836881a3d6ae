# session 6, call 3: fused routing (router + top-k + layout in one launch) and PDL on the Triton kernels
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== new tests"; timeout 120 python3 -m pytest -q -x -m gpu tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -p no:cacheprovider > $OUT/new_tests.log 2>&1
rc=$?; grep -v "^  " $OUT/new_tests.log | tail -25; [ $rc = 0 ] || exit 1
echo "== decode"; timeout 100 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -4
echo "== decode c1 no pdl"; STRATA_NO_PDL=1 timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_nopdl.json 2>&1 | $F | tail -2
echo "== profile graph"; timeout 60 python3 .devscripts/profile_graph.py "$M" graph > $OUT/profile_graph.log 2>&1; grep -v "^loaded\|Warn\|warn" $OUT/profile_graph.log | head -30
echo "== gpu suite"; timeout 230 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | tail -15
