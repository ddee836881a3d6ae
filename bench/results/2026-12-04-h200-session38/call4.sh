# Session 38, call 4: the graph test with seeded ids against the 8-bit pairs' own reference, packed_mmq's GPU tests;
# then where a Qwen3-Next 8L Q4_K_M prompt's time goes (its 512-token prefill ran at 1-2K tok/s in call 3).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 80 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_mmq.py tests/kernels/test_packed_moe.py \
  -k "cuda_graph or equal_the_pairs or each_step" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-next-80b-a3b?num_hidden_layers=8' /tmp/next.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
PROMPT_LENS=128,256,512 PROF_LEN=512 timeout -s INT 150 python3 prompt_step_prof.py /tmp/next.gguf > $OUT/next_prompt_prof.txt 2>&1
echo "== prof rc=$? t=$(( $(date +%s)-S ))"; head -40 $OUT/next_prompt_prof.txt | cut -c1-160
