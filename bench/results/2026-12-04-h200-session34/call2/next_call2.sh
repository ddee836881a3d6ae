# Session 34, call 2: the packed-kernel GPU tests call 1 did not reach (its pytest hit the time limit at 460 of 490,
# none failed) and Q2_K / Q3_K's scales read as words (packed_q8); lowbit_ab again for the words' effect; where a
# speculative step's time goes (spec_timeline.py) for issue 28's model at 1 and 4 streams and Qwen4-Exp at 4.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_moe.py \
  tests/kernels/test_gguf_blocks.py tests/experts/test_packed_experts.py tests/weights/test_packed_gguf.py --tb=short \
  > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | head -12 | cut -c1-200
timeout -s INT 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_q8.py --tb=short \
  -k "10 or 11" > $OUT/tests_q8.log 2>&1
echo "== q8 tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests_q8.log | head -12 | cut -c1-200
timeout -s INT 60 python3 lowbit_ab.py 1 4 8 > $OUT/lowbit_ab.txt 2>&1
echo "== lowbit_ab rc=$? t=$(( $(date +%s)-S ))"; grep -E "Q2_K|Q3_K" $OUT/lowbit_ab.txt | cut -c1-240
timeout -s INT 150 python3 spec_timeline.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' - 1 4 > $OUT/tl_next.txt 2>&1
echo "== timeline next rc=$? t=$(( $(date +%s)-S ))"; cut -c1-200 $OUT/tl_next.txt | head -80
LEFT=$(( 570 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 spec_timeline.py 'random:qwen4exp-125b?num_hidden_layers=4' - 4 > $OUT/tl_q4e.txt 2>&1
echo "== timeline q4e rc=$? t=$(( $(date +%s)-S ))"; cut -c1-200 $OUT/tl_q4e.txt | head -60
