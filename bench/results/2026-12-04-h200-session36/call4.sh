REPO=$PWD
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
T="tests/runner/test_cuda_graphs.py::test_qwen4_exp_graphs_run_dense_steps_and_keep_tokens[mtp]"
r() { timeout -s INT $2 python3 -m pytest -q -m gpu -p no:cacheprovider "$T" --tb=short > $OUT/$1.log 2>&1; echo "== $1 rc=$? t=$(( $(date +%s)-S )) $(grep -E 'passed|failed' $OUT/$1.log | tail -1)"; }
r new 110
c=s34; mkdir -p /tmp/$c && tar -xf $REPO/.base/$c.tar -C /tmp/$c; cd /tmp/$c; export PYTHONPATH=/tmp/$c:/tmp/site:/tmp/hf; r $c 70
