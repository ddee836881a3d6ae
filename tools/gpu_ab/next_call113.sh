# Prepared in session 72 (~7 minutes; run under a 600 s limit): issue 29's 4-stream speculation command on
# Qwen4-Exp 4L bf16 (PLE on layer 1, its table read in place: the default since session 71), twice in one process
# each, on whatever card comes (the H200 has not run the in-place read yet; session 66's H200 gave 1.49x / 1.51x
# with the host gather).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
EXP='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 exp_c4_1 src "$EXP" $(( $(left 560) < 300 ? $(left 560) : 300 ))
grep -h "page-locked\|PLE table" /tmp/exp_c4_1.log | tee -a $OUT/ab.txt
[ $(left 560) -gt 100 ] && spec_c4 exp_c4_2 src "$EXP" $(left 560)
runs_table "exp_c4_*.json"
