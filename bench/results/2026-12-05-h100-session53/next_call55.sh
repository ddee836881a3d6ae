# Session 53 (~4 minutes; after next_call53.sh, which runs the pairs' GPU tests on this tree): the i-quants' 8-bit
# pairs with a code book row of 8 read as one 8-byte load (q8_steps._iq_step -> packed_iquants.signed_word_pair)
# against the tree before (.base/old.tar), two alternated rounds of iq_pairs_ab.py. Compiled for sm_90 on the
# development VM, the one-token gate/up launch takes 2,784 / 2,688 / 2,808 / 2,080 SASS instructions for IQ2_XXS /
# IQ2_XS / IQ2_S / IQ1_S against 3,800 / 2,784 / 4,136 / 3,272 before; the float grouped kernels (prompts of i-quant
# experts) read the rows the same way (gate/up at 64 x 32, 4 warps: IQ2_XXS 3,328 -> 3,176, its register spills gone).
# Build the archives first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#                            git archive <before> -o .base/old.tar
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
mkdir -p /tmp/old && tar -xf $OLDPWD/.base/old.tar -C /tmp/old && cp tools/gpu_ab/*.py /tmp/old/
for R in 1 2; do for T in old src; do
  (cd /tmp/$T && ARM=$T PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 100 python3 iq_pairs_ab.py >> $OUT/ab.txt 2>&1)
  echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))"
done; done
sort -k2,4 -s $OUT/ab.txt | cut -c1-120
