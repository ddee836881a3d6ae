# Session 31 call 2: the one-token MoE pair tilings A/B on the 30B-A3B and Qwen4-Exp Q4_K_M files (one process each,
# arms alternated), and critical-path traces of the 30B's decode steps at 1 and 8 streams.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
echo "== quantized t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 pairs_ab.py /tmp/q4km.gguf 3 > $OUT/pairs_ab_30b.txt 2>&1
echo "== pairs 30b rc=$? t=$(( $(date +%s)-S ))"; grep "tok/s" $OUT/pairs_ab_30b.txt
timeout -s INT 100 python3 trace_steps.py /tmp/q4km.gguf $OUT/t30b 1 8 > $OUT/trace_30b.txt 2>&1
echo "== trace rc=$? t=$(( $(date +%s)-S ))"; head -14 $OUT/trace_30b.txt | cut -c1-120
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
LEFT=$(( 570 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 pairs_ab.py /tmp/q4e.gguf 3 > $OUT/pairs_ab_q4e.txt 2>&1
echo "== pairs q4e rc=$? t=$(( $(date +%s)-S ))"; grep "tok/s" $OUT/pairs_ab_q4e.txt
