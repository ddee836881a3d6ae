# session 7, call 2: attention splits of >= 256 tokens, o_proj L2 prefetch from attention, down self-prefetch
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== tests"; timeout 150 python3 -m pytest -q -x -m gpu tests/kernels/test_fused_ops.py tests/kernels/test_kernels.py tests/runner/test_cuda_graphs.py -k "prefetch or paged_attention or programmatic or attention" -p no:cacheprovider > $OUT/tests.log 2>&1
rc=$?; grep -v "^  " $OUT/tests.log | tail -8; [ $rc = 0 ] || exit 1
echo "== l2 hot"; timeout 40 python3 .devscripts/l2_hot_bench.py 2>&1 | grep -v Warn | tee $OUT/l2_hot.log
for arm in default old NO_DOWN NO_PREFETCH default old; do
  case $arm in default) E="";; old) E="STRATA_NO_L2_PREFETCH=1 STRATA_X_MIN_SPLIT_TOKENS=64";; NO_DOWN) E="STRATA_X_NO_DOWN_PREFETCH=1";; NO_PREFETCH) E="STRATA_NO_L2_PREFETCH=1";; esac
  echo "== decode c1 $arm"; env $E timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$arm.$RANDOM.json 2>&1 | $F | tail -1
done
echo "== profile"; STRATA_NO_PDL=1 timeout 70 python3 .devscripts/profile_graph.py "$M" graph 2>&1 | grep -v Warn > $OUT/profile_graph_nopdl.log; head -16 $OUT/profile_graph_nopdl.log
