# call 2 (the machine still warm after call 1), from the repository root with carry [".whl", ".base"]
source tools/gpu_ab/device_setup.sh; S=$(date +%s)
timeout -s KILL 170 python3 env_ab.py /tmp/q4km.gguf PY_HOST_PART 3 expert_cache=25% cpu_threads=16 expert_swap_interval=0 > $OUT/py_host_part_ab3.txt 2>&1
echo "== A/B rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|Error" $OUT/py_host_part_ab3.txt
timeout -s INT 220 python3 -m pytest -q -p no:cacheprovider tests/experts/test_expert_offload_gpu.py > $OUT/tests_offload_gpu.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "passed|failed|FAILED|Error" $OUT/tests_offload_gpu.log | tail -6
