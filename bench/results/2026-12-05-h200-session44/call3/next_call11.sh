# Session 44, call 3: bisect the one failing GPU split test (Qwen4-Exp, graphs, MTP, two groups).
source tools/gpu_ab/device_setup.sh
cp /tmp/src/tools/gpu_ab/split_graph_bisect.py . 2>/dev/null
timeout -s INT 200 python3 split_graph_bisect.py qwen4_exp 2>&1 | grep -E "OK|DIFF|Error" | tail -8
timeout -s INT 120 python3 split_graph_bisect.py qwen3_next 2>&1 | grep -E "OK|DIFF|Error" | tail -8
