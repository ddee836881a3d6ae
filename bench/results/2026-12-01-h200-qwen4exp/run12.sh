export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
timeout 150 python3 .base/prof_prefill.py > $OUT/prof_prefill.txt 2>&1; echo rc=$?; grep -v Warning $OUT/prof_prefill.txt | cut -c1-75,150-175 | head -40
