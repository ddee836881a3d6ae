# For the next session (prepared in session 51, ~7 minutes; say which card). Q4_K's and Q6_K's K steps with a group's
# words in a loop (q8_steps.k_step ISUM=2: dp4a accumulates a group's words in one int32, one float scaling a group,
# no cross-lane reduction): compiled for sm_90 on the development VM, the 30B-A3B's gate/up pairs at PAIR_CONFIG
# (16, 2, 1) fell from 1,704 SASS instructions and 255 registers to 960 and 80 (IDP 128 in both), the one-token
# tiling (1, 8, 1) from 648 / 99 to 464 / 64, down (16, 2, 1) from 680 / 80 to 616 / 64. Session 50's Nsight run
# found the 64-token prompt's pairs bound by instructions at 255 registers (most of c1's 17 ms TTFT).
# A doubt, found after writing it: the loop's layout puts rows of W across lanes, so each 32-bit load of a warp
# touches up to 32 cache lines (4 useful bytes a line) where the tiles' loads touch 4 (32 bytes a line): L1 may
# become the limit (~1 ms a layer for the 64-token prompt's 906 MB of pair reads at one line a clock an SM). The
# sweep decides; the whole-model A/B runs only where the sweep finds ISUM=2 faster at 1 or 64 tokens.
# (1) Its GPU tests. (2) pairs_sweep at 1 / 8 / 64 tokens, ISUM 0 and 2. (3) Issue 23's c1 / c8 / c16 with ISUM=2 in
# every pairs tiling (`words`: a patched copy of the tree) against HEAD, two alternated rounds, JSONs kept.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 120 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "integer_group_sums" \
  -p no:cacheprovider > $OUT/tests.log 2>&1; echo "== tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests.log | cut -c1-300
PAIRS_TOKENS=1,8,64 PAIRS_BN=1,4,8,16 PAIRS_SB=2,4,8 PAIRS_WARPS=1,2 PAIRS_STAGES=3 PAIRS_ISUM=0,2 timeout -s INT 150 \
  python3 pairs_sweep.py > $OUT/pairs_sweep.txt 2>&1; echo "== sweep rc=$? t=$(( $(date +%s)-S ))"
grep -E "^tokens" $OUT/pairs_sweep.txt | cut -c1-160
python3 - $OUT/pairs_sweep.json <<'PY' > $OUT/words_pay.txt; cat $OUT/words_pay.txt
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if "gate_up_us" in r]
for tokens in (1, 8, 64):
    for key in ("gate_up_us", "down_us"):
        best = [min((r[key] for r in rows if r["tokens"] == tokens and r["isum"] == i), default=None) for i in (0, 2)]
        pays = None not in best and best[1] < best[0]
        print(tokens, key, "isum 0 / 2 best:", *best, "PAYS" if pays else "")
PY
grep -q PAYS $OUT/words_pay.txt || { echo "== ISUM=2 does not pay in the sweep: no whole-model A/B"; exit 0; }
mkdir -p /tmp/words && tar -xf $OLDPWD/.base/src.tar -C /tmp/words
sed -i -E 's/^(PAIR_CONFIG|ONE_TOKEN_GATE_UP|ONE_TOKEN_DOWN) = dict\((.*)\)$/\1 = dict(\2, ISUM=2)/' \
  /tmp/words/strata/kernels/packed_q8.py
grep -E "^(PAIR_CONFIG|ONE_TOKEN_GATE_UP|ONE_TOKEN_DOWN) =" /tmp/words/strata/kernels/packed_q8.py | tee $OUT/patched.txt
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2; do for T in src words; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 1,8,16 --repeats 1 --output $OUT/${T}_r$R.json > /tmp/b_$T.log 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt; grep -E "strata_c" /tmp/b_$T.log >> $OUT/ab.txt
done; done
cat $OUT/ab.txt | cut -c1-120
