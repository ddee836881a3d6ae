# Prepared in session 32: issue 28's command at 8 streams (session 32: 3,915.6, 3,972.5, 3,898.3 against 3,933), issue 29
# at Q4_K_M one stream (s29-s31: 1,121.9, 1,106.5, 1,070.2 against 1,122), issue 23's 30B-A3B Q4_K_M command; if time is
# left, where a one-stream speculative step's host time goes on issue 28's model (host_prof.py; session 32: 1.90 ms a
# step, 0.26 host + 0.50 launch not hidden).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 120 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 8 --repeats 3 \
  --output $OUT/next80_c8.json > $OUT/next80_c8.log 2>&1
echo "== issue 28 c8 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/next80_c8.log | tail -2 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 150 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --concurrency 1 --repeats 3 --output $OUT/q4e_q4km.json > $OUT/q4e_q4km.log 2>&1
echo "== issue 29 Q4_K_M c1 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_q4km.log | tail -2 | cut -c1-200
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
LEFT=$(( 570 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 64 --output-len 128 --repeats 1 --concurrency 1,8,16 --prefill-lens 512 --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 30B Q4_K_M rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-200
LEFT=$(( 580 - ($(date +%s)-S) ))
[ $LEFT -gt 60 ] && timeout -s INT $LEFT python3 host_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' spec > $OUT/host_prof_spec.txt 2>&1
echo "== host_prof spec rc=$? t=$(( $(date +%s)-S ))"; head -3 $OUT/host_prof_spec.txt | cut -c1-300
LEFT=$(( 590 - ($(date +%s)-S) ))
[ $LEFT -gt 60 ] && timeout -s INT $LEFT python3 head_rows_ab.py 1 4 8 16 > $OUT/head_rows_ab.txt 2>&1
echo "== head_rows_ab rc=$? t=$(( $(date +%s)-S ))"; cat $OUT/head_rows_ab.txt | grep rows= | cut -c1-200
