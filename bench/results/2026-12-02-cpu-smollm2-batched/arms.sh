#!/bin/bash
# Alternated arms, one fresh process per run, each the command (1 and 8 streams): strata at the change
# (a `git archive` of it in $NEW) and strata before it ($BASE), new first.
# usage: NEW=/path/to/new/tree BASE=/path/to/base/tree PY=/path/to/venv/python arms.sh OUTDIR ROUNDS
out=$1; rounds=$2
for i in $(seq 1 "$rounds"); do for arm in new base; do
  if [ $arm = base ]; then src=$BASE; else src=$NEW; fi
  cd "$src" || exit 1
  uptime > "$out/${arm}_$i.load"
  PYTHONPATH=$src $PY -m strata.cli.main bench offline smollm2-135m --device cpu --max-model-len 1024 \
    --num-prompts 16 --input-len 64 --output-len 64 --repeats 1 --concurrency 1,8 \
    --output "$out/${arm}_$i.json" > "$out/${arm}_$i.log" 2>&1
  uptime >> "$out/${arm}_$i.load"
done; done
