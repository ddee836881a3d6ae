# session 7, call 8: fresh prompts (and the windows beside them) as graph replays: tests, synthetic c4 A/B, c1 TTFT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== tests"; timeout 130 python3 -m pytest -q -x -m gpu tests/runner/test_cuda_graphs.py -k "fresh_prompts or on_off_token_identity or evicts" -p no:cacheprovider > $OUT/tests.log 2>&1
rc=$?; grep -v "^  " $OUT/tests.log | tail -6; [ $rc = 0 ] || { grep -B5 -A30 "Error\|assert" $OUT/tests.log | head -80; exit 1; }
SP='{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}'
echo "== synthetic c4, prompt graphs"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 96 --concurrency 4 --repeats 1 --speculative-config "$SP" --spec-baseline --output $OUT/spec_c4_prompt_graphs.json 2>&1 | $F | tail -2
echo "== synthetic c4, prompts eager"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 96 --concurrency 4 --repeats 1 --speculative-config "$SP" --spec-baseline --cuda-graph-prompt-tokens 0 --output $OUT/spec_c4_prompts_eager.json 2>&1 | $F | tail -2
echo "== decode c1"; timeout 45 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1.json 2>&1 | $F | tail -1
