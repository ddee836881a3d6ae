# Session 62, call 3 (~5 minutes, the warm machine of call 2): issue 29's speculation at 4 streams from the new tree
# (call 2's run timed out at 150 s compiling the new tree's kernels first), then from the old tree again.
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
for T in src prev; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 135 python3 -m strata.cli.main bench offline \
    'random:qwen4exp-125b?num_hidden_layers=4' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 \
    --output-len 128 --concurrency 4 --repeats 2 --speculative-config "$SPEC" --spec-baseline \
    --output $OUT/q4e_$T.json > /tmp/q4e_$T.log 2>&1)
  rc=$?; echo "== q4e $T rc=$rc t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; [ $rc = 0 ] || tail -4 /tmp/q4e_$T.log | cut -c1-300 >> $OUT/ab.txt
  grep -E "strata_" /tmp/q4e_$T.log | cut -c1-200 | tee -a $OUT/ab.txt
done
