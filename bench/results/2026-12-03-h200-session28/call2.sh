# Session 28 call 2: where a single-stream decode step's time goes (step_anatomy.py), three models.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 70 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 150 python3 step_anatomy.py /tmp/q4km.gguf $OUT/a30b 2>&1 | grep -v Warn | tail -5
echo "== 30B t=$(( $(date +%s)-S ))"
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 150 python3 step_anatomy.py /tmp/q4e.gguf $OUT/aq4e 2>&1 | grep -v Warn | tail -5
echo "== Qwen4-Exp t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 step_anatomy.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' $OUT/anext 2>&1 | grep -v Warn | tail -5
echo "== next t=$(( $(date +%s)-S ))"
gzip $OUT/*.json; ls -la $OUT
