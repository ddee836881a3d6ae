# For the next session's first call (prepared in session 50, ~8-10 minutes; H200 or H100, say which). (1) The 8-bit MoE
# pairs' tilings at 1 and 64 tokens with programs of 1-2 rows and whole K rows in flight (pairs_sweep.py's new knobs):
# session 50's Nsight run found a one-token gate/up at 0.73 waves of one-warp programs stalled on loads (1.0 TB/s), and
# a 64-token prompt's at 255 registers (12.5 % occupancy): the pairs are most of a one-stream step's MoE (~20 us a
# layer) and of the 17 ms TTFT in issue 23's c1. (2) The best one-token tilings of (1) written into a copy of
# the tree (patch_pair_tilings.py) against HEAD: issue 23's c1, two alternated rounds (multi-token tilings are only
# reported: PAIR_CONFIG serves 2-128 pairs and wants its own A/B at c8 / c16).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
PAIRS_TOKENS=1,8,64 PAIRS_BN=1,2,4,8,16 PAIRS_SB=1,2,4,8 PAIRS_WARPS=1,2,4 PAIRS_STAGES=3 timeout -s INT 200 \
  python3 pairs_sweep.py > $OUT/pairs_sweep.txt 2>&1; echo "== sweep rc=$? t=$(( $(date +%s)-S ))"
grep -E "^tokens|best" $OUT/pairs_sweep.txt | cut -c1-220
mkdir -p /tmp/best && tar -xf $OLDPWD/.base/src.tar -C /tmp/best
python3 patch_pair_tilings.py $OUT/pairs_sweep.json /tmp/best > $OUT/patched.txt 2>&1; echo "== patch rc=$?"; cat $OUT/patched.txt
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2; do for T in src best; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 80 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 8 --input-len 64 --output-len 128 \
    --concurrency 1 --repeats 1 > /tmp/c1_$T.log 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/c1_ab.txt; grep -E "strata_c1" /tmp/c1_$T.log >> $OUT/c1_ab.txt
done; done
cat $OUT/c1_ab.txt | cut -c1-120
