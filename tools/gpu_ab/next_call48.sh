# For a later session (prepared in session 51, ~4 minutes): how far the 8-bit pairs on i-quant experts (the 125B's
# 2-3-bit files) are from the K-quants. Compiled for sm_90 on the development VM, gate/up at PAIR_CONFIG (16, 2, 1)
# takes 3,200-4,500 SASS instructions for IQ2_XXS / IQ3_XXS / IQ3_S rows against Q4_K's 1,760 (one token (1, 8, 1):
# ~870-1,150 against 624). pairs_sweep.py on the 30B-A3B's expert shape with IQ2_XXS gate/up and IQ3_XXS down, then
# IQ3_S / IQ3_S, at 1 / 8 / 64 tokens and a few tilings; compare with session 51's Q4_K / Q6_K sweep (call 3) per byte.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
for Q in "16 18" "21 21"; do set -- $Q
  PAIRS_Q13=$1 PAIRS_Q2=$2 PAIRS_TOKENS=1,8,64 PAIRS_BN=1,4,8,16 PAIRS_SB=2,8 PAIRS_WARPS=1 PAIRS_STAGES=3 \
    timeout -s INT 110 python3 pairs_sweep.py > $OUT/pairs_q$1_q$2.txt 2>&1
  echo "== q$1 / q$2 rc=$? t=$(( $(date +%s)-S ))"; mv $OUT/pairs_sweep.json $OUT/pairs_q$1_q$2.json 2>/dev/null
  grep -E "^tokens|best" $OUT/pairs_q$1_q$2.txt | cut -c1-160
done
