# Alternated arms on git worktrees: /tmp/ab_new (the commit under test) and /tmp/ab_old (2b44960, this session's
# start); single stream against HF (session 19's run.py), then the issue's 1- and 8-stream command. OUT=<folder> bash arms.sh
PY=/work/main/.venv/bin/python
out=$OUT
for r in 1 2 3; do
  for arm in new hf; do
    uptime > $out/single_${arm}_$r.load
    cd /tmp/ab_new && CPU_MATMUL=exact PYTHONPATH=/tmp/ab_new $PY bench/results/2026-12-02-cpu-smollm2-int8/run.py $([ $arm = hf ] && echo hf || echo strata) > $out/single_${arm}_$r.json 2>$out/single_${arm}_$r.err
  done
  for arm in new old; do
    uptime > $out/c8_${arm}_$r.load
    cd /tmp/ab_$arm && PYTHONPATH=/tmp/ab_$arm $PY -m strata.cli.main bench offline smollm2-135m --device cpu --max-model-len 1024 \
      --num-prompts 16 --input-len 64 --output-len 64 --repeats 1 --concurrency 1,8 --output $out/c8_${arm}_$r.json > $out/c8_${arm}_$r.log 2>&1
    uptime >> $out/c8_${arm}_$r.load
  done
done
echo finished > $out/done
