# session 12, call 2: critical path of the single-stream decode graph with PDL on (end-to-end deltas), 64 and 3000 tokens
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
timeout 200 python3 .devscripts/s12_profile.py > $OUT/profile64.log 2>&1; echo rc=$?
grep -v Warning $OUT/profile64.log | grep -v "_warn_once" | head -5
PROMPT_LEN=3000 timeout 200 python3 .devscripts/s12_profile.py > $OUT/profile3000.log 2>&1; echo rc=$?
grep -v Warning $OUT/profile3000.log | grep -v "_warn_once" | head -5
