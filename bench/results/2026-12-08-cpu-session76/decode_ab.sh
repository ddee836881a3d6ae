#!/usr/bin/env bash
# The bundled model's one-stream decode at 512 / 4,096 / 8,000 tokens of context and an 8-stream command,
# the tree before the attention changes (/tmp/wt_att: git worktree add /tmp/wt_att <the commit before the one that
# splits the CPU attention's keys>) against this tree, ROUNDS alternated rounds, one fresh process a run.
ROUNDS=${ROUNDS:-3}
PY=/work/main/.venv/bin/python
for r in $(seq 1 $ROUNDS); do
  for arm in base new; do
    tree=/work/main; [ $arm = base ] && tree=/tmp/wt_att
    (cd $tree && PYTHONPATH=$tree $PY -m strata.cli.main bench offline --num-prompts 2 --input-len 16 --output-len 8 \
      --concurrency 1 --repeats 1 --decode-contexts 512,4096,8000 --output /tmp/dec_$arm_$r.json 2>&1) \
      | grep decode_at | sed "s/^/round $r $arm /"
    (cd $tree && PYTHONPATH=$tree $PY -m strata.cli.main bench offline --num-prompts 16 --input-len 64 --output-len 128 \
      --concurrency 8 --repeats 1 --output /tmp/c8_$arm_$r.json 2>&1) | grep strata_c8 | sed "s/^/round $r $arm /"
  done
done
