# session 6, call 1: what session 5 changed after its last device call (4395530..HEAD): per-step pinned
# input copies, cached eager layouts, hybrid checkpoints ahead, MTP drafts on the device, sampler syncs
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== gpu suite"; timeout 230 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | tail -12
echo "== synthetic 2.0 c1-8"; timeout 110 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 96 --concurrency 1,2,4,8 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic20.json 2>&1 | $F | tail -9
echo "== decode"; timeout 100 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -4
echo "== pdl"; timeout 60 python3 .devscripts/pdl_bench.py 2>&1 | tail -5
echo "== profile graph"; timeout 60 python3 .devscripts/profile_graph.py "$M" graph > $OUT/profile_graph.log 2>&1; grep -v "^loaded\|Warn\|warn" $OUT/profile_graph.log | head -44
echo "== profile eager"; timeout 60 python3 .devscripts/profile_graph.py "$M" eager > $OUT/profile_eager.log 2>&1; grep -v "^loaded\|Warn\|warn" $OUT/profile_eager.log | head -30
