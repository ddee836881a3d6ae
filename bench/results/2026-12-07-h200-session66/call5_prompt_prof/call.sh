# Session 65 (~4 minutes, any card): where a prompt step's time goes on issue 29's model (Qwen4-Exp 4L bf16). At 4
# streams with speculation a prompt-carrying step took ~11-12 ms whether it carried one 64-token prompt or four
# (bench/results/2026-12-07-session65/), against ~5 ms to read the ~14 GB of experts a 64-token prompt touches (71 %
# of 512 top-10) at copy bandwidth. 1-token generates at 16 / 64 / 256-token prompts, then a 64-token prompt's
# kernels under torch's profiler (tools/gpu_ab/prompt_step_prof.py).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
PROMPT_LENS=16,64,256 PROF_LEN=64 timeout -s INT 240 python3 prompt_step_prof.py 'random:qwen4exp-125b?num_hidden_layers=4' \
  2>&1 | grep -v -E "^(loaded|GPU memory|  |KV cache|experts|torch CPU)" | tee $OUT/prompt_prof.txt
