# Prepared in session 32 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar). Untested on a GPU: the PLE layer in three launches (kernels/ple.py: rows, gate, conv;
# opt-in with STRATA_FUSED_PLE=1; make it the default if 1-2 hold). 1. its kernel tests and the Qwen4-Exp graph / HF
# tests with it on;
# 2. the A/B in one process on Qwen4-Exp 4L with PLE (session 32: 815.4 tok/s at c1 with PLE against 1,053.9
# without, ~0.27 ms a step of small torch launches); 3. issue 29's PLE command (targets c1 50 % of copy bandwidth,
# c8 3,630, c16 4,784, prefill 16,632).
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
STRATA_FUSED_PLE=1 timeout -s INT 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_ple_kernels.py tests/runner/test_cuda_graphs.py \
  --tb=short -k "ple or qwen4_exp or greedy_matches_hf_through" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
timeout -s INT 120 python3 env_ab.py 'random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=1000000' FUSED_PLE 3 \
  > $OUT/ab_ple.txt 2>&1
echo "== ab ple rc=$? t=$(( $(date +%s)-S ))"; grep "tok/s" $OUT/ab_ple.txt
LEFT=$(( 570 - ($(date +%s)-S) ))
STRATA_FUSED_PLE=1 timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=1000000' \
  --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --concurrency 1,8,16 --repeats 2 \
  --prefill-lens 512 --output $OUT/q4e_ple.json > $OUT/q4e_ple.log 2>&1
echo "== issue 29 bf16 with PLE rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s" $OUT/q4e_ple.log | tail -4 | cut -c1-200
