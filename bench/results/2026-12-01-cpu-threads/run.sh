#!/bin/bash
# Alternates 1 and 2 torch threads, 3 rounds each under load, 2 idle, with and without a second CPU-heavy process
# (one Python busy loop, pinned nowhere: it competes for any core). Run from the repo root on a 2-core host.
cd "$(dirname "$0")"
PY=../../../.venv/bin/python
for load in busy idle; do
  if [ $load = busy ]; then $PY -c "while True: pass" & HOG=$!; fi
  for round in $(seq $([ $load = busy ] && echo 3 || echo 2)); do
    for t in 1 2; do echo "{\"load\": \"$load\", \"round\": $round, \"result\": $($PY run.py $t 2>/dev/null)}"; done
  done
  if [ $load = busy ]; then kill $HOG; fi
done
