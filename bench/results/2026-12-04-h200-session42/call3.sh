# Session 42, call 3 (run inline): issue 28's speculation at 4 streams through the bench's own loop (bench_prof.py),
# then every offload GPU test with their durations.
source tools/gpu_ab/device_setup.sh; S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 200 python3 bench_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 4 "spec=$SPEC" prompts=32 input=64 output=128 > $OUT/bench_prof_spec_c4.txt 2>&1
echo "== bench_prof spec c4 rc=$? t=$(( $(date +%s)-S ))"; grep -E "=====" $OUT/bench_prof_spec_c4.txt | cut -c1-400
timeout -s INT 300 python3 -m pytest -v -p no:cacheprovider --durations=30 tests/experts/test_expert_offload_gpu.py > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "PASS|FAIL|ERROR|passed|failed" $OUT/tests.log | cut -c1-200 | tail -40
