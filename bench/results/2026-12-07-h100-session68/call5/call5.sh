# Session 68 (~3 minutes, any card): run_idle.py again on issue 28's 4-stream speculation run, split steps against
# mixed graphs, now without the steps' GPU echoes among the kernels (they covered the device's gaps inside a step),
# and the top 30 kernels of each step kind.
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 run_idle.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' arms=spec,mixed top=30 > $OUT/idle_next.txt 2>&1
echo "== idle next rc=$? t=$(( $(date +%s)-S ))"
grep -vE "^\s*$|Warning|warn" $OUT/idle_next.txt | grep -v "^    .*us  " | cut -c1-200
