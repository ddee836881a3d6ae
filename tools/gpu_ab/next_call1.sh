# Prepared in session 39 for the next session's first device call: why issue 23's offload slowed (25 % of the
# 30B-A3B Q4_K_M's experts on the GPU, 16 CPU threads: 173.9 tok/s at 7376f35 in session 22; session 39 measured
# 30.0 at HEAD and, in one machine start, 119.9 (7376f35) against 34.3 (HEAD) with a 32-token run).
# 1. offload_prof.py at HEAD (the host part's wait / CPU experts / rest); 2. the short command on commits between
# (native kernels build at first use in each tree: ~40-60 s, hence the long timeouts). Build the archives first:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
#   mkdir -p .base/bis && for c in 89a7239~1 89a7239 d21b378~1 fa8ee07 bb8b012 37a28aa; do
#     git archive --format=tar.gz $c strata -o .base/bis/$(git rev-parse --short $c).tgz; done
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 40 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 150 python3 offload_prof.py /tmp/q4km.gguf > $OUT/offload_prof.txt 2>&1
echo "== prof rc=$? t=$(( $(date +%s)-S ))"; grep -E "steps in|calls" $OUT/offload_prof.txt
OFF="--device cuda --max-model-len 4096 --num-prompts 1 --input-len 64 --output-len 32 --repeats 1 --concurrency 1
  --cpu-threads 16 --pcie-frac 0 --expert-swap-interval 0 --expert-cache 25%"
# torch's idle threads spinning beside the CPU experts?
for ENV in "OMP_WAIT_POLICY=PASSIVE" "STRATA_X=1 --torch-threads 1"; do
  set -- $ENV; (env $1 timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf $OFF ${@:2} \
    --output $OUT/off_head_${1%%=*}.json) > $OUT/off_head_${1%%=*}.log 2>&1
  echo "== HEAD $ENV rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/off_head_${1%%=*}.log | cut -c1-90)"
done
for T in $OLDPWD/.base/bis/*.tgz; do
  C=$(basename $T .tgz); D=/tmp/bis/$C; mkdir -p $D && tar -xzf $T -C $D
  (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    $OFF --output $OUT/off_$C.json) > $OUT/off_$C.log 2>&1
  echo "== $C rc=$? t=$(( $(date +%s)-S )) $(grep -E 'strata_c1' $OUT/off_$C.log | cut -c1-90)"
done
