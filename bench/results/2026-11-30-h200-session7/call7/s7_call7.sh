# session 7, call 7: host profile of eager mixed steps (prompt admitted beside decodes)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python3 .devscripts/host_mixed.py 2>&1 | grep -v Warn > $OUT/host_mixed.log; head -3 $OUT/host_mixed.log
