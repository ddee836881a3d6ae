#!/usr/bin/env bash
# The bundled model's prompt throughput at 512-8,000 tokens, the parent commit's tree (/tmp/wt_base: git worktree add
# /tmp/wt_base HEAD~1 of the commit that adds model/cpu_sdpa.py) against this tree, ROUNDS alternated rounds, one
# fresh process a run. Output: one line a run and prefill length.
ROUNDS=${ROUNDS:-3}
PY=/work/main/.venv/bin/python
for r in $(seq 1 $ROUNDS); do
  for arm in base new; do
    tree=/work/main; [ $arm = base ] && tree=/tmp/wt_base
    (cd $tree && PYTHONPATH=$tree $PY -m strata.cli.main bench offline --num-prompts 2 --input-len 16 --output-len 8 \
      --concurrency 1 --repeats 1 --prefill-lens 512,2048,4096,8000 --output /tmp/prefill_$arm_$r.json 2>&1) \
      | grep prefill_ | sed "s/^/round $r $arm /"
  done
done
