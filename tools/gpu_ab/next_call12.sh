# Prepared in session 45 (its device time ran out first): its split changes' GPU tests (graph parts under a split),
# then issue 23's offload with the static split, now the default.
# Where an offloaded layer's time goes at 25 % with zero copy auto (session 45: 76.4 tok/s, 13.1 ms a token, where
# the CPU's and the in-place reads' bytes would take ~8-10 ms): offload_timeline.py's host parts (event wait, CPU
# experts, the rest) and the time between them, at 16 and 15 pool threads.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
# session 45's split changes, written without a GPU: fresh prompts in graph parts under a split (every arm asserts
# part steps happened), window states kept apart with two groups
timeout -s INT 240 python3 -m pytest -q -p no:cacheprovider tests/runner/test_pipeline.py -m gpu -k cuda_graphs \
  > $OUT/tests_split_graphs.log 2>&1
echo "== split graph tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_split_graphs.log | tail -8
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s INT 120 python3 offload_timeline.py /tmp/q4km.gguf cache=25% zc=auto arms=16:5000,15:5000 \
  > $OUT/timeline_static25.txt 2>&1
echo "== timeline rc=$? t=$(( $(date +%s)-S ))"; grep -v "^\s" $OUT/timeline_static25.txt | grep -E "threads|Error" | cut -c1-700
timeout -s INT 110 python3 offload_timeline.py /tmp/q4km.gguf cache=25% zc=0 arms=16:5000 \
  > $OUT/timeline_static25_nozc.txt 2>&1
echo "== timeline no zero copy rc=$? t=$(( $(date +%s)-S ))"; grep -E "threads|Error" $OUT/timeline_static25_nozc.txt | cut -c1-700
