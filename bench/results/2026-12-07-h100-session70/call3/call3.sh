# Prepared in session 70 (~5 minutes, any card): Qwen4-Exp 4L's verification step at 4 streams kernel by kernel
# without programmatic dependent launch (STRATA_NO_PDL=1, so per-kernel times do not overlap), then a 64-token
# prompt step's kernels without it.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
EXP='random:qwen4exp-125b?num_hidden_layers=4'
STRATA_NO_PDL=1 timeout -s INT 200 python3 spec_kernels.py "$EXP" 4 48 > $OUT/exp_c4_nopdl.txt 2>&1
echo "== spec_kernels no PDL rc=$? t=$(( $(date +%s)-S ))"; grep -E "=====|device a decode" $OUT/exp_c4_nopdl.txt
[ $(( $(date +%s)-S )) -lt 240 ] && STRATA_NO_PDL=1 PROMPT_LENS=64 PROF_LEN=64 timeout -s INT 90 python3 \
  prompt_step_prof.py "$EXP" > $OUT/exp_prompt64_nopdl.txt 2>&1
echo "== prompt_step_prof rc=$? t=$(( $(date +%s)-S ))"; tail -5 $OUT/exp_prompt64_nopdl.txt
