# Session 38, call 3: packed_mmq dispatched (4-24 pairs an expert) and its sub-blocks in a loop (UNROLL False, no
# spills by ptxas). 1. GPU tests of packed_mmq / packed_moe / packed experts; 2. mmq tilings x UNROLL at 128-512
# tokens; 3. Qwen3-Next 8L at Q4_K_M: prefill with the q8 grouped kernels off / on, alternated.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_packed_mmq.py tests/kernels/test_packed_moe.py \
  tests/experts/test_packed_experts.py tests/weights/test_packed_gguf.py -x > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | head -8 | cut -c1-200
GROUPED_ARMS=mmq PROMPT_TOKENS=128,256,512 timeout -s INT 150 python3 prompt_moe_ab.py > $OUT/mmq_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -E "tokens|failed" $OUT/mmq_sweep.txt | cut -c1-600
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
timeout -s INT 90 python3 -m strata.cli.main quantize "$M" /tmp/next.gguf --scheme q4_k_m --device cuda > $OUT/quant.log 2>&1
echo "== quant rc=$? t=$(( $(date +%s)-S ))"; tail -2 $OUT/quant.log | cut -c1-200
for R in a b; do for OFF in 1 0; do
  STRATA_NO_GROUPED_Q8=$OFF timeout -s INT 70 python3 -m strata.cli.main bench offline /tmp/next.gguf --device cuda \
    --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 16 --concurrency 1 --repeats 1 --prefill-lens 128,512 \
    > /tmp/pf.log 2>&1
  echo "== next no_grouped_q8=$OFF $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/prefill_next.log; cat /tmp/pf.log >> $OUT/prefill_next.log
  grep -E "prefill_|tok/s" /tmp/pf.log | head -4 | cut -c1-120
done; done
