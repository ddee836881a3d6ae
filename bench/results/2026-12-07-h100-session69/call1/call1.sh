# Session 69 call 1 (any card): decode attention's split count at short and middle contexts (attn_short_ab.py),
# issue 23's commands at HEAD (30B-A3B 24L Q4_K_M: c1 / c8 / c16 and the 512-token prefill) and a trace of its decode
# steps' kernels at 1 and 8 streams (critical path per kernel); on an H200 also the offload command at 25 % and 50 %.
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 90 python3 attn_short_ab.py > $OUT/attn_short.txt 2>&1; echo "== attn rc=$? t=$(( $(date +%s)-S ))"
grep -v Warn $OUT/attn_short.txt | cut -c1-220
quantize_q4km
cat /tmp/q4km.gguf > /dev/null
timeout -s INT 200 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --prefill-lens 512 \
  --output $OUT/q4km.json > $OUT/q4km.log 2>&1
echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4km.log | tail -5 | cut -c1-200
timeout -s INT 90 python3 trace_steps.py /tmp/q4km.gguf /tmp/trace 1 8 > $OUT/trace_steps.txt 2>&1
echo "== trace rc=$? t=$(( $(date +%s)-S ))"; grep -v Warn $OUT/trace_steps.txt | head -c 4500
if nvidia-smi -L | grep -q H200; then for P in 25 50; do
[ $(( $(date +%s)-S )) -lt 430 ] && timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
  --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
  --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache $P% --output $OUT/off$P.json > $OUT/off$P.log 2>&1
echo "== offload $P% rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off$P.log | cut -c1-200
done; fi
