# Session 40, call 3: the offload at HEAD, measured from the inside (call 2: 7376f35's offloaded run emitted token 0
# throughout and routed 87 % of its pairs to the resident quarter; HEAD routes uniformly). (1) quant_moe alone on this
# host's cores, 1-16 threads; (2) offload_check.py with top logprobs (HEAD's 25 % and all-resident tokens differ);
# (3) offload_timeline.py: a decode step's host parts and the gaps between them, CPU pool of 16/15/14/12/8 threads.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 45 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 120 python3 qmoe_scale.py > $OUT/qmoe_scale.txt 2>&1
echo "== qmoe_scale rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/qmoe_scale.txt
timeout -s INT 100 python3 offload_check.py /tmp/q4km.gguf > $OUT/check_head.txt 2>&1
echo "== check rc=$? t=$(( $(date +%s)-S ))"; grep -E "expert_cache|token 0|missed|equal" $OUT/check_head.txt | cut -c1-300
timeout -s INT 150 python3 offload_timeline.py /tmp/q4km.gguf > $OUT/timeline.txt 2>&1
echo "== timeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline.txt | cut -c1-400
