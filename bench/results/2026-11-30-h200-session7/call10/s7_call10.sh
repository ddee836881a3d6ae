export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 80 python3 -m pytest -q -x -m gpu tests/runner/test_cuda_graphs.py -k "fresh_prompts" -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"; grep -v "^  " $OUT/tests.log | tail -4
