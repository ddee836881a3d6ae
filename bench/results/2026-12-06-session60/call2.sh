# Session 60, call 2 (~8 minutes, any card; say which): issue 29's commands at HEAD, last run together in sessions
# 32-33 (H200). Qwen4-Exp 4L bf16 with PLE on layer 1 (1M base) at 1 / 8 / 16 streams and a 512-token prefill; its
# synthetic speculation (L = 3, k = 3) against none at 1 / 4 / 8 / 16 streams (the random shape's default PLE); the
# same model at Q4_K_M, one stream.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L | tee $OUT/card.txt
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 150 python3 -m strata.cli.main bench offline "$Q4E&ngram_vocab_size_base=1000000" --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 1 \
  --prefill-lens 512 --output $OUT/q4e_ple.json > /tmp/b.log 2>&1
echo "== issue 29 bf16 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
timeout -s INT 200 python3 -m strata.cli.main bench offline "$Q4E" --device cuda --max-model-len 4096 --num-prompts 32 \
  --input-len 64 --output-len 128 --concurrency 1,4,8,16 --repeats 1 --speculative-config "$SPEC" --spec-baseline \
  --output $OUT/q4e_spec.json > $OUT/spec.log 2>&1
echo "== issue 29 spec rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_|at most" $OUT/spec.log | cut -c1-200 | tee -a $OUT/ab.txt
[ $(( $(date +%s)-S )) -lt 400 ] && timeout -s INT 50 python3 -m strata.cli.main quantize "$Q4E" /tmp/q4e.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1
[ $(( $(date +%s)-S )) -lt 450 ] && timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda \
  --max-model-len 4096 --num-prompts 8 --input-len 128 --output-len 128 --concurrency 1 --repeats 2 \
  --output $OUT/q4e_q4km.json > /tmp/b.log 2>&1
echo "== issue 29 q4_k_m rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "strata_c" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
