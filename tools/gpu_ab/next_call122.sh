# Session 75's last ~200 s of device time: next_call121.sh's A/B once (src, then prev), no tests. Archives as next_call121.sh.
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
mkdir -p /tmp/prev && tar -xf .base/prev.tar -C /tmp/prev && cp tools/gpu_ab/*.py /tmp/prev/
source tools/gpu_ab/device_setup.sh
quantize_q4km
for T in src prev; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -k 5 -s INT 70 python3 -m strata.cli.main bench \
    offline /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 \
    --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% \
    --output $OUT/off25_$T.json > $OUT/off25_$T.log 2>&1)
  echo "== $T rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25_$T.log | cut -c1-170
done
