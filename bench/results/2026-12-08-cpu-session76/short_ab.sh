#!/usr/bin/env bash
# One stream's decode at 512 tokens of context and the plain one-stream line, base (/tmp/wt_att: the tree before the
# attention changes) against this tree, ROUNDS alternated rounds (a check that short contexts did not lose).
ROUNDS=${ROUNDS:-4}
PY=/work/main/.venv/bin/python
for r in $(seq 1 $ROUNDS); do
  for arm in base new; do
    tree=/work/main; [ $arm = base ] && tree=/tmp/wt_att
    (cd $tree && PYTHONPATH=$tree $PY -m strata.cli.main bench offline --num-prompts 4 --input-len 64 --output-len 128 \
      --concurrency 1 --repeats 1 --decode-contexts 512 --output /tmp/short_$arm_$r.json 2>&1) \
      | grep -E "decode_at|strata_c1" | sed "s/^/round $r $arm /"
  done
done
