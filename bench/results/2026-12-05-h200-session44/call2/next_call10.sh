# Session 44, call 2: the pipeline split's GPU tests again after two fixes the first call found (a stage without
# the PLE layer moved its meta table; a failed build left the process group behind, failing every later split
# test; the first call ran the other four sharing-one-GPU tests, which passed), then the shared-card split
# bench (next_call9.sh's arms cut to 1 and 8 streams to fit one call).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 250 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runner/test_pipeline.py \
  -k "qwen4_exp or cuda_graphs" > $OUT/tests_pipeline.log 2>&1
echo "== pipeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_pipeline.log | tail -12
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
B="--device cuda --max-model-len 4096 --num-prompts 8 --input-len 128 --output-len 128 --concurrency 1,8 --repeats 1 --sync-vs-async"
timeout -s INT 100 python3 -m strata.cli.main bench offline "$M" $B --output $OUT/split1.json > $OUT/split1.log 2>&1
echo "== one process rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_' $OUT/split1.log | cut -c1-120 | tr '\n' ' ')"
STRATA_PIPELINE_SHARE_GPUS=1 timeout -s INT 190 python3 -m strata.cli.main bench offline "$M" $B \
  --pipeline-parallel-size 2 --output $OUT/split2.json > $OUT/split2.log 2>&1
echo "== two stages rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_|captured' $OUT/split2.log | cut -c1-120 | tr '\n' ' ')"
