#!/bin/bash
# Alternated arms, one fresh process per run: strata at the change (a `git archive` of it in $NEW), HF transformers,
# strata before the change ($BASE); each run is bench/results/2026-12-01-cpu-smollm2-packed/run.py (torch at
# 2 threads, 39-token chat prompt, 128 greedy tokens, one warm-up, best of 3).
# usage: NEW=/path/to/new/tree BASE=/path/to/base/tree arms.sh OUTDIR ROUNDS
out=$1; rounds=$2
for i in $(seq 1 "$rounds"); do for arm in strata hf base; do
  if [ $arm = base ]; then src=$BASE; mode=strata; else src=$NEW; mode=$arm; fi
  cd "$src" || exit 1
  uptime > "$out/${arm}_$i.load"
  PYTHONPATH=$src python bench/results/2026-12-01-cpu-smollm2-packed/run.py $mode > "$out/${arm}_$i.json" 2> /dev/null
  uptime >> "$out/${arm}_$i.load"
done; done
