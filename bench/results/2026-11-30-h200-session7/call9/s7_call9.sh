export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M="random:qwen3-30b-a3b?num_hidden_layers=24"
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
SP='{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}'
echo "== synthetic c4, prompt graphs"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 96 --concurrency 4 --repeats 1 --speculative-config "$SP" --spec-baseline --output $OUT/spec_c4_prompt_graphs.json 2>&1 | $F | tail -2
echo "== synthetic c4, prompts eager"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 96 --concurrency 4 --repeats 1 --speculative-config "$SP" --spec-baseline --cuda-graph-prompt-tokens 0 --output $OUT/spec_c4_prompts_eager.json 2>&1 | $F | tail -2
