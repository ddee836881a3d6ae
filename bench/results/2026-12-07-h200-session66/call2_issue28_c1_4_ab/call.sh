# Session 65 (~8 minutes, any card): issue 28's speculation targets (>= 1.6x none at 1, 2 and 4 streams) on Qwen3-Next
# 8L bf16 with the draft cost model's fix (6b4170a: plain decoding no longer retried after every wait; the CPU
# scheduler fed GPU-like step times took 394-397 decode steps at 1 stream before it, 355-361 after, 351-361 with k
# fixed) against 8462e36 (before it), each one process over 1, 2 and 4 streams, two repeats.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz 8462e36 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
arm() {  # NAME TREE SECONDS
  (cd /tmp/$2 && PYTHONPATH=/tmp/$2:/tmp/site:/tmp/hf timeout -s INT $3 python3 -m strata.cli.main bench offline \
    "$NEXT" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,2,4 \
    --repeats 2 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' \
    --spec-baseline --output $OUT/$1.json > /tmp/$1.log 2>&1)
  echo "== $1 rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt
  grep -E "strata_" /tmp/$1.log | cut -c1-200 | tee -a $OUT/ab.txt
}
arm next_src src 250
arm next_prev prev 230
