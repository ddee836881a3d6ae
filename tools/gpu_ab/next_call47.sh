# After session 52's next_call45.sh: if the pairs with a group's words in a loop (ISUM=2) pay at 64 tokens
# (prepared in session 51, ~5 minutes): where they stop beating packed_mmq's int8 tensor-core kernel on prompts
# (packed_moe.Q8_PAIRS_PER_EXPERT is 4 pairs an expert: a 64-token prompt of the 30B-A3B). prompt_moe_ab.py's mmq
# mode at 32-256 tokens on the 30B-A3B's, Qwen3-Next's and Qwen4-Exp's experts, `q8_pairs_words` beside `q8_pairs`.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
GROUPED_ARMS=mmq PROMPT_TOKENS=32,64,96,128,256 timeout -s INT 400 python3 prompt_moe_ab.py > $OUT/prompt_moe.txt 2>&1
echo "== prompt moe rc=$? t=$(( $(date +%s)-S ))"; cut -c1-220 $OUT/prompt_moe.txt | tail -20
