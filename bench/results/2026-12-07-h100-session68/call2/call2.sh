# Session 67 call 2 (~9 minutes, any card): issue 29's speculation command at 4 streams (Qwen4-Exp 4L bf16) from HEAD
# (the experts meter without host syncs, the Gated DeltaNet recurrence loading a token ahead) and from 8dcd505,
# alternated; then issue 23's c1 / c8 with two repeats (session 66 on an H200: 730.2 / 2,181.2 against 740 / 2,200).
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz 8dcd505 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 q4e_src_1 src "$Q4E" 150
spec_c4 q4e_prev_1 prev "$Q4E" 130
[ $(( $(date +%s)-S )) -lt 330 ] && spec_c4 q4e_src_2 src "$Q4E" 130
if [ $(( $(date +%s)-S )) -lt 430 ]; then
  quantize_q4km
  timeout -s INT $(( 570-$(date +%s)+S )) python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 2 \
    --output $OUT/q4km.json > $OUT/q4km.log 2>&1
  echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -4 | cut -c1-200
fi
runs_table "q4e_*.json"
