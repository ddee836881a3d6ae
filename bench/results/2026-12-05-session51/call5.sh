# Session 51, after the one-token pairs tilings (BLOCK_N 1, 8 superblocks for gate/up; 2 superblocks for down) and the
# fused-merge test's TF32 bound: their GPU tests, then session 50's 8-row GEMV tests, then issue 23's c1 / c8 once.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
timeout -s INT 150 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "moe_pairs and not 48" \
  -p no:cacheprovider > $OUT/tests_pairs.log 2>&1; echo "== pairs tests rc=$? t=$(( $(date +%s)-S ))"
tail -2 $OUT/tests_pairs.log | cut -c1-300
timeout -s INT 60 python3 -m pytest -q -m gpu tests/kernels/test_kernels.py -k "fused_merge" -p no:cacheprovider \
  > $OUT/tests_merge.log 2>&1; echo "== merge test rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_merge.log | cut -c1-300
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
  --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8 --repeats 1 --output $OUT/c1_c8.json \
  > $OUT/bench.log 2>&1; echo "== bench rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/bench.log | cut -c1-120
timeout -s INT 170 python3 -m pytest -q -m gpu tests/kernels/test_packed_q8.py -k "gemv" -p no:cacheprovider \
  > $OUT/tests_gemv.log 2>&1; echo "== gemv tests rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/tests_gemv.log | cut -c1-300
