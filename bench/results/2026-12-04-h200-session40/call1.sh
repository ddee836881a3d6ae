# Session 40, call 1: why issue 23's expert offload slowed (25 % of the 30B-A3B Q4_K_M's experts on the GPU, 16 CPU
# threads: 119.9 tok/s at 7376f35 against 34.3 at HEAD in one machine start, session 39). offload_prof.py at HEAD and
# at 7376f35 (host part: wait for the copies, CPU experts, rest; graph counters), then HEAD with idle OpenMP threads
# sleeping (OMP_WAIT_POLICY=PASSIVE) and with one torch thread.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 45 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 offload_prof.py /tmp/q4km.gguf > $OUT/prof_head.txt 2>&1
echo "== prof HEAD rc=$? t=$(( $(date +%s)-S ))"; grep -E "steps in|calls|graphs|threads" $OUT/prof_head.txt | cut -c1-300
D=/tmp/old; mkdir -p $D && tar -xzf $OLDPWD/.base/bis/7376f35.tgz -C $D && cp offload_prof.py $D/
(cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 150 python3 offload_prof.py /tmp/q4km.gguf) > $OUT/prof_7376f35.txt 2>&1
echo "== prof 7376f35 rc=$? t=$(( $(date +%s)-S ))"; grep -E "steps in|calls|graphs|threads" $OUT/prof_7376f35.txt | cut -c1-300
OFF="--device cuda --max-model-len 4096 --num-prompts 1 --input-len 64 --output-len 32 --repeats 1 --concurrency 1
  --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0 --expert-cache 25%"
for ENV in "OMP_WAIT_POLICY=PASSIVE" "STRATA_X=1 --torch-threads 1"; do
  set -- $ENV; (env $1 timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF ${@:2} \
    --output $OUT/off_head_${1%%=*}.json) > $OUT/off_head_${1%%=*}.log 2>&1
  echo "== HEAD $ENV rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/off_head_${1%%=*}.log | cut -c1-110)"
done
