# Prepared in session 44 (no device lent): issue 27 on one card, two stages sharing the H200 (activations and the
# decode steps' sampled tokens through host memory), each stage's CUDA graphs, against one process; each arm with
# --async-scheduling off, then on (decode steps planned ahead under a split are new in session 44).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
# issue 27 on one card: two stages sharing the H200 (activations through host memory), now with each stage's CUDA
# graphs, against one process, Qwen3-Next 8L bf16 (session 26, eager: 60.3 / 321.8 / 540.4 tok/s at c1 / c8 / c16
# against one process's 118.8 / 740.4 / 1,927.2 eager)
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
B="--device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 --sync-vs-async"
timeout -s INT 240 python3 -m strata.cli.main bench offline "$M" $B --output $OUT/split1.json > $OUT/split1.log 2>&1
echo "== one process rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_' $OUT/split1.log | cut -c1-120 | tr '\n' ' ')"
STRATA_PIPELINE_SHARE_GPUS=1 timeout -s INT 320 python3 -m strata.cli.main bench offline "$M" $B \
  --pipeline-parallel-size 2 --output $OUT/split2.json > $OUT/split2.log 2>&1
echo "== two stages rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_|captured' $OUT/split2.log | cut -c1-120 | tr '\n' ' ')"
