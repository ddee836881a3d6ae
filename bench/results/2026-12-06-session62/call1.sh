# Session 62, call 1 (~9 minutes). On an H200: issue 23's commands (session 50's call 1). On an H100: where a
# 4-stream speculative step of Qwen4-Exp (issue 29: 1.47-1.48x, asks 1.5x) and of Qwen3-Next 8L (issue 28) spends
# its device time, kernel by kernel, against plain decoding (tools/gpu_ab/spec_kernels.py).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L | tee $OUT/gpu.txt
if nvidia-smi -L | grep -q H200; then
  bash bench/results/2026-12-05-session50/call1.sh > $OUT/issue23_h200.txt 2>&1; exit 0
fi
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 330 python3 spec_kernels.py 'random:qwen4exp-125b?num_hidden_layers=4' 4 48 > $OUT/q4e_c4.txt 2>&1
echo "== q4e rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 200 python3 spec_kernels.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 4 48 > $OUT/next_c4.txt 2>&1
echo "== next rc=$? t=$(( $(date +%s)-S ))"
grep -E "=====|device a" $OUT/*_c4.txt
