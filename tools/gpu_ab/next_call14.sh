# Prepared in session 45: STRATA_LAUNCH_AHEAD=1 (the graph after an offloaded layer's host part launched before it,
# waiting on a flag in pinned memory) against unset, issue 23's offload at 25 % (static split, zero copy auto, 16
# threads), one process, arms alternated twice; first the GPU tests of gated splits and every offload GPU test (a
# hang there is a bug: the timeouts stop it).
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s KILL 170 python3 -m pytest -q -p no:cacheprovider tests/runner/test_split_graphs.py tests/kernels/test_host_flag.py \
  tests/experts/test_expert_offload_gpu.py > $OUT/tests_gated.log 2>&1  # (every offload GPU test: the static default)
echo "== gated tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_gated.log | tail -6
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
cat /tmp/q4km.gguf > /dev/null
timeout -s KILL 200 python3 env_ab.py /tmp/q4km.gguf LAUNCH_AHEAD 2 expert_cache=25% cpu_threads=16 \
  expert_swap_interval=0 > $OUT/launch_ahead_ab.txt 2>&1
echo "== A/B rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/launch_ahead_ab.txt
# the host part's "rest" (session 42's timeline: 73 of 505 us a layer outside the wait and the CPU experts): cProfile
timeout -s INT 90 python3 offload_prof.py /tmp/q4km.gguf cache=25% threads=16 > $OUT/offload_prof_static25.txt 2>&1
echo "== offload prof rc=$? t=$(( $(date +%s)-S ))"; head -40 $OUT/offload_prof_static25.txt | cut -c1-200
