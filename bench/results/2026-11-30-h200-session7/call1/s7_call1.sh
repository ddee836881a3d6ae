# session 7, call 1: skinny_linear + L2 prefetch: tests, micro-bench, decode arms, profile
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== new tests"; timeout 120 python3 -m pytest -q -x -m gpu tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py -k "skinny or prefetch or programmatic" -p no:cacheprovider > $OUT/new_tests.log 2>&1
rc=$?; grep -v "^  " $OUT/new_tests.log | tail -8; [ $rc = 0 ] || exit 1
echo "== skinny bench"; timeout 90 python3 .devscripts/skinny_bench.py 2>&1 | grep -v Warn > $OUT/skinny_bench.log; grep -v "^  " $OUT/skinny_bench.log
for arm in default NO_SKINNY_LINEAR NO_L2_PREFETCH BOTH_OFF; do
  case $arm in default) E="";; BOTH_OFF) E="STRATA_NO_SKINNY_LINEAR=1 STRATA_NO_L2_PREFETCH=1";; *) E="STRATA_$arm=1";; esac
  echo "== decode c1 $arm"; env $E timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$arm.json 2>&1 | $F | tail -2
done
echo "== decode c1/8/16 default"; timeout 100 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -4
echo "== profile"; timeout 70 python3 .devscripts/profile_graph.py "$M" graph 2>&1 | grep -v Warn > $OUT/profile_graph.log; head -22 $OUT/profile_graph.log
