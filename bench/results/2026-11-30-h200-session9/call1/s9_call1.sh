# session 9, call 1: code b676fd7: per-step log of synthetic 2.0 vs none at 16/32 streams; cProfile of spec at 32
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== steps"; timeout 200 python3 .devscripts/spec_steps.py $OUT/steps.jsonl -- bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec20.json 2>&1 | $F | tail -4
python3 .devscripts/analyze_steps.py $OUT/steps.jsonl
echo "== cprofile spec 32"; timeout 150 python3 .devscripts/spec_host_gpu.py "$M" 32 > $OUT/cprofile32.log 2>&1; echo rc=$?; head -60 $OUT/cprofile32.log
