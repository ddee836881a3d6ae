# Prepared in session 43 (no device lent): the pipeline split's GPU tests on one card (STRATA_PIPELINE_SHARE_GPUS:
# two stage processes on cuda:0), now with Qwen4-Exp (its streams crossing the split) and the packed-weight fix
# (a stage loads only its own packed weights) and graphs per stage; the offload GPU tests (the expert manager's layer
# ids changed); then a shared-card split bench with graphs against one process.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runner/test_pipeline.py > $OUT/tests_pipeline.log 2>&1
echo "== pipeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_pipeline.log | tail -8
timeout -s INT 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/experts/test_expert_offload_gpu.py \
  > $OUT/tests_offload.log 2>&1
echo "== offload rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_offload.log | tail -8
# issue 27 on one card: two stages sharing the H200 (activations through host memory), now with each stage's CUDA
# graphs, against one process, Qwen3-Next 8L bf16 (session 26, eager: 60.3 / 321.8 / 540.4 tok/s at c1 / c8 / c16
# against one process's 118.8 / 740.4 / 1,927.2 eager)
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
B="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1"
timeout -s INT 150 python3 -m strata.cli.main bench offline "$M" $B --output $OUT/split1.json > $OUT/split1.log 2>&1
echo "== one process rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c' $OUT/split1.log | cut -c1-120 | tr '\n' ' ')"
STRATA_PIPELINE_SHARE_GPUS=1 timeout -s INT 200 python3 -m strata.cli.main bench offline "$M" $B \
  --pipeline-parallel-size 2 --output $OUT/split2.json > $OUT/split2.log 2>&1
echo "== two stages rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c|captured' $OUT/split2.log | cut -c1-120 | tr '\n' ' ')"
