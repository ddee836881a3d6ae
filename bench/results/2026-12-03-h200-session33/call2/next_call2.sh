# Session 33 call 2: the PLE graph tests that call 1's time limit cut (fused PLE now the default), issue 29 at Q4_K_M
# one stream (s29-s31: 1,121.9, 1,106.5, 1,070.2 against 1,122), where a one-stream speculative step's host time goes
# on issue 28's model (host_prof.py; session 32: 1.90 ms a step, 0.26 host + 0.50 launch not hidden), and the Q6_K
# head at 1-16 rows (head_rows_ab.py).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_ple_kernels.py tests/runner/test_cuda_graphs.py \
  --tb=short -k "host_kv or host_ple_table or test_ple_rows or qwen4_exp_graphs_run_dense" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --concurrency 1 --repeats 3 --output $OUT/q4e_q4km.json > $OUT/q4e_q4km.log 2>&1
echo "== issue 29 Q4_K_M c1 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_q4km.log | tail -2 | cut -c1-200
LEFT=$(( 470 - ($(date +%s)-S) ))
[ $LEFT -gt 60 ] && timeout -s INT $LEFT python3 host_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' spec > $OUT/host_prof_spec.txt 2>&1
echo "== host_prof spec rc=$? t=$(( $(date +%s)-S ))"; head -30 $OUT/host_prof_spec.txt | cut -c1-300
LEFT=$(( 580 - ($(date +%s)-S) ))
[ $LEFT -gt 60 ] && timeout -s INT $LEFT python3 head_rows_ab.py 1 4 8 16 > $OUT/head_rows_ab.txt 2>&1
echo "== head_rows_ab rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/head_rows_ab.txt | grep rows= | cut -c1-200
