# Session 60 (~6 minutes, any card; not run: no machine came): what session 60's call 2 could not run on an 80 GB
# card. Issue 29's synthetic speculation (L = 3, k = 3) against none at 1 / 4 / 8 / 16 streams on the random shape's
# default PLE (its 95 GiB table in host memory, now drawn in row pieces), then Qwen4-Exp 4L at Q4_K_M without PLE (as
# sessions 29-33), one stream.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 240 python3 -m strata.cli.main bench offline "$Q4E" --device cuda --max-model-len 4096 --num-prompts 32 \
  --input-len 64 --output-len 128 --concurrency 1,4,8,16 --repeats 1 --speculative-config "$SPEC" --spec-baseline \
  --output $OUT/q4e_spec.json > $OUT/spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_|at most" $OUT/spec.log | cut -c1-200 | tee -a $OUT/ab.txt
timeout -s INT 60 python3 -m strata.cli.main quantize "$Q4E&ple_layer_ids=none" /tmp/q4e.gguf --scheme q4_k_m \
  --device cuda > $OUT/quant.log 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt
timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 \
  --num-prompts 8 --input-len 128 --output-len 128 --concurrency 1 --repeats 2 --output $OUT/q4e_q4km.json > /tmp/b.log 2>&1
echo "== issue 29 q4_k_m rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
