# Session 59, call 2 (right after call 1 on the same warm H100, /tmp/next.gguf and the two trees kept): call 1's
# Qwen3-Next 8L Q4_K_M prefill again with a 150 s limit (call 1's src arm ran out of its 60 s compiling kernels),
# src / prev / src.
ls /tmp/next.gguf /tmp/src >/dev/null && cd /tmp/src && export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf; S=$(date +%s)
for T in src prev src; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 150 python3 -m strata.cli.main bench offline \
    /tmp/next.gguf --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 16 --concurrency 1 \
    --repeats 1 --prefill-lens 96,128,192 > /tmp/b.log 2>&1)
  echo "== $T rc=$? t=$(( $(date +%s)-S ))"; grep -E "prefill|strata_c|Error|error" /tmp/b.log | cut -c1-200
done
