# Prepared in session 70 (~9 minutes, any card): Qwen4-Exp's PLE table read in place (STRATA_PLE_IN_PLACE=1: the
# host table page-locked where it lies, a GGUF file's blocks read-only over its map, the step's rows gathered by the
# device over PCIe (packed rows dequantized as they are read), no graph split)
# against the host gather between two graph parts. Session 70's kernel profile (next_call107.sh, no PDL) found the
# 4-stream steps idle 0.6-0.76 ms a verification step (2-3 gaps over 100 us each) and 0.37 ms a plain step. Its GPU
# tests, then issue 29's speculation command at 4 streams: off (its first repeat pays the cold compile
# caches; compare the runs' lines), on, off again if there is time.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests ple_in_place 120 tests/kernels/test_sm_gather.py tests/runner/test_cuda_graphs.py \
  tests/kernels/test_packed_gemv.py tests/weights/test_qwen4_exp_gguf.py -k "gather_rows or ple_table or in_place"
EXP='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 exp_split_1 src "$EXP" 180
STRATA_PLE_IN_PLACE=1 spec_c4 exp_inplace_1 src "$EXP" 170  # locking the 102 GB table takes part of it
grep -h "page-locked\|cudaHostRegister" /tmp/exp_inplace_1.log | tee -a $OUT/ab.txt
[ $(( $(date +%s)-S )) -lt 470 ] && spec_c4 exp_split_2 src "$EXP" 120
runs_table "exp_*.json"
