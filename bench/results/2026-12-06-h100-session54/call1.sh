# Session 53 found issue 23's offload command at 25 % on an H100 host slower at HEAD than at 6faf23d (session 50's
# end): 90.5 / 89.2 against 102.5 / 101.6 tok/s, two alternated rounds, gap p95 11.7-11.9 against 10.0 ms, TTFT the
# same. Candidates (~6 minutes): the one-token pairs tilings (a805373, session 51), their K-step sums (ad90c54,
# session 52), the zero-copy experts read in place through those pairs. Arms: each .base/arms/COMMIT.tar.gz (before
# and after each candidate), HEAD, and HEAD with the one-token pairs at 6faf23d's tilings (`tile1`: gate/up (4, 2, 1),
# down (8, 1, 1), no integer group sums); two alternated rounds.
# Build the archives first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#   for c in 6faf23d ee53365 a805373 f0ec8db ad90c54; do git archive --format=tar.gz $c -o .base/arms/$c.tar.gz; done
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
ARMS=""
for A in $OLDPWD/.base/arms/*.tar.gz; do
  N=$(basename $A .tar.gz); mkdir -p /tmp/$N && tar -xzf $A -C /tmp/$N; ARMS="$ARMS $N"
done
mkdir -p /tmp/tile1 && tar -xf $OLDPWD/.base/src.tar -C /tmp/tile1
python3 - <<'PY'
path = "/tmp/tile1/strata/kernels/packed_q8.py"
s = open(path).read()
old = ("ONE_TOKEN_GATE_UP = dict(BLOCK_N=4, SUPERBLOCKS=8, num_warps=1, num_stages=3, ISUM=1)\n"
       "ONE_TOKEN_DOWN = dict(BLOCK_N=8, SUPERBLOCKS=2, num_warps=1, num_stages=3, ISUM=2)\n")
new = ("ONE_TOKEN_GATE_UP = dict(BLOCK_N=4, SUPERBLOCKS=2, num_warps=1, num_stages=3)\n"
       "ONE_TOKEN_DOWN = dict(BLOCK_N=8, SUPERBLOCKS=1, num_warps=1, num_stages=3)\n")
assert s.count(old) == 1, "the one-token tilings changed: update the patch"
open(path, "w").write(s.replace(old, new))
print("tile1: one-token pairs at 6faf23d's tilings")
PY
quantize_q4km
cat /tmp/q4km.gguf > /dev/null
for R in 1 2; do for T in $ARMS src tile1; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 60 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
    --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% --output $OUT/${T}_r$R.json \
    > $OUT/${T}_r$R.log 2>&1)
  echo "== $T r$R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt
  grep -E "strata_c1" $OUT/${T}_r$R.log | cut -c1-110 >> $OUT/ab.txt
done; done
cat $OUT/ab.txt
