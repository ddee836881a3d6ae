# Session 37, call 3: packed prompt MoE arms incl. every expert dequantized (prompt_moe_ab.py), a Q4_K_M 512-token
# prompt's kernels (prompt_step_prof.py), admission hold 0 / 1 alternated twice on issue 28's spec sweep.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
PROMPT_TOKENS=64,256,512 timeout -s INT 150 python3 prompt_moe_ab.py > $OUT/prompt_moe_ab.txt 2>&1; echo "== moe rc=$? t=$(( $(date +%s)-S ))"
grep tokens $OUT/prompt_moe_ab.txt | cut -c1-330
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m \
  --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
PROMPT_LENS=64,512 PROF_LEN=512 timeout -s INT 90 python3 prompt_step_prof.py /tmp/q4km.gguf > $OUT/prompt_prof_q4km.txt 2>&1
echo "== prof rc=$? t=$(( $(date +%s)-S ))"; grep -v Warn $OUT/prompt_prof_q4km.txt | head -22 | cut -c1-150
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
for R in a b; do for H in 0 1; do
  timeout -s INT 60 python3 -m strata.cli.main bench offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 \
    --input-len 64 --output-len 128 --concurrency 2,4,8 --repeats 1 --speculative-config "$SPEC" --spec-baseline \
    --admission-hold-steps $H > /tmp/hold.log 2>&1
  echo "== hold $H $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/hold.log; cat /tmp/hold.log >> $OUT/hold.log
  grep -E "tok/s" /tmp/hold.log | tail -6 | cut -c1-150
done; done
