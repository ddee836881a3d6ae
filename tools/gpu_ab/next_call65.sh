# Session 55 (~2 minutes, after next_call66.sh, which now holds this call's tests and A/B): trace_steps.py on issue
# 23's model with packed_q8_joined on (the default since session 57; session 55's trace put the separate v GEMV at
# 3.1 us of such a layer at one stream, 11.2 at eight).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
quantize_q4km
timeout -s INT 80 python3 trace_steps.py /tmp/q4km.gguf /tmp/trace 1 8 > $OUT/trace_steps.txt 2>&1
echo "== trace rc=$? t=$(( $(date +%s)-S ))"; head -c 1200 $OUT/trace_steps.txt
