# Session 53 (~4 minutes, after next_call61.sh, which runs the GPU tests this call ran first until session 54):
# IQ4_XS and MXFP4 experts on the 8-bit pairs against the float kernels (STRATA_NO_Q8_ACTIVATIONS=1), two alternated
# rounds; then IQ3_S's two code book indices of a group in one 2-byte load (and the float grouped kernels' IQ3_S rows
# through signed_word_pair) against 1efe841 (.base/iq3s_before.tar.gz), two alternated rounds of iq_pairs_ab.py on
# (IQ3_S, IQ3_S), (IQ2_XS, IQ3_S) and the Q4_K / Q6_K control. sm_90 counts on the development VM: one-token gate/up
# 3,384 -> 2,944 SASS instructions, down (8, 2, ISUM 2) 568 -> 512, grouped gate/up 4,176 -> 3,872 (stack 112 -> 40
# bytes).
# Build the archives first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#                            git archive --format=tar.gz 1efe841 -o .base/iq3s_before.tar.gz
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
for R in 1 2; do for F in 1 0; do
  STRATA_NO_Q8_ACTIVATIONS=$F ARM=no_q8=$F IQ_PAIRS=23:23,39:39,12:14 timeout -s INT 100 python3 iq_pairs_ab.py \
    >> $OUT/iq4.txt 2>&1
done; done
sort -k2,4 -s $OUT/iq4.txt | cut -c1-120
mkdir -p /tmp/before && tar -xzf $OLDPWD/.base/iq3s_before.tar.gz -C /tmp/before && cp tools/gpu_ab/*.py /tmp/before/
for R in 1 2; do for T in before src; do
  (cd /tmp/$T && ARM=$T IQ_PAIRS=21:21,17:21,12:14 PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 100 \
    python3 iq_pairs_ab.py >> $OUT/ab.txt 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))"
done; done
sort -k2,4 -s $OUT/ab.txt | cut -c1-120
