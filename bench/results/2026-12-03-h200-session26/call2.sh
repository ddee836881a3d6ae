# Session 26, call 2 (issue 27's one-GPU part): `bash call2.sh` (run as tools/gpu_ab/session26_call2.sh) with carry [".whl", ".base"]
# after `git archive HEAD -o .base/src.tar; git rev-parse --short HEAD > .base/COMMIT`.
# 0. message latency between two gloo processes (gloo_pingpong.py);
# 1. the split's GPU tests: two stages sharing cuda:0 (STRATA_PIPELINE_SHARE_GPUS=1), float and packed weights;
# 2. the model at 8 layers, eager: one process, 2 stages one step at a time, 2 stages with 2 batch groups
#    (two processes on one card time-share it: this shows the split's cost, not its speed-up on two cards).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
echo "== pingpong"; timeout 60 python3 gloo_pingpong.py 2>&1 | tail -2
echo "== tests"; timeout -s INT 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_pipeline.py \
  > $OUT/tests.log 2>&1
echo rc=$? t=$(( $(date +%s)-S )); grep -E "passed|failed|FAILED|Error" $OUT/tests.log | tail -8 | cut -c1-300
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
bench() {  # tag extra-args
  timeout -s INT 150 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --no-cuda-graphs \
    --num-prompts 16 --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --gpu-memory-utilization 0.45 \
    "${@:2}" --output $OUT/$1.json > $OUT/$1.log 2>&1
  echo "== $1 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|Error" $OUT/$1.log | tail -4 | cut -c1-120
}
export STRATA_PIPELINE_SHARE_GPUS=1
bench pp1
bench pp2_g1 --pipeline-parallel-size 2 --batch-groups 1
bench pp2_g2 --pipeline-parallel-size 2 --batch-groups 2
