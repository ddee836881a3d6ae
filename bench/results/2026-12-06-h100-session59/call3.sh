# Session 59 (~10 minutes): call 72 (packed_mmq's word unpack: its GPU tests both ways, mmq_prompt_ab.py off / on,
# two rounds), then where a prompt's step should leave the 8-bit pairs (STRATA_PROMPT_Q8_PAIRS_PER_EXPERT 2 / 3 / 4):
# next_call71 found the landed 2 slower on Qwen3-Next 8L Q4_K_M's 96-128-token prompts (512 experts, padded to 128
# rows: 2.5 pairs an expert), faster on the 30B-A3B's 64-token ones (4 pairs an expert). Qwen3-Next's prefill at
# 96-256 tokens per value, two rounds; issue 23's 16 streams with synthetic speculation at 3 against 4, two rounds.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
run_tests mmq_words 120 -n 4 tests/kernels/test_packed_mmq.py
for R in 1 2; do for F in 0 1; do
  STRATA_MMQ_WORD_UNPACK=$F ARM=words=$F timeout -s INT 60 python3 mmq_prompt_ab.py >> $OUT/mmq_ab.txt 2>&1
  echo "== words=$F round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/mmq_ab.txt
done; done
sort -s -t, -k2,2 $OUT/mmq_ab.txt | cut -c1-160
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-next-80b-a3b?num_hidden_layers=8' /tmp/next.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== next quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2; do for P in 2 3 4; do
  [ $(( $(date +%s)-S )) -lt 400 ] || break
  STRATA_PROMPT_Q8_PAIRS_PER_EXPERT=$P timeout -s INT 90 python3 -m strata.cli.main bench offline /tmp/next.gguf \
    --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 16 --concurrency 1 --repeats 2 \
    --prefill-lens 96,128,192,256 > /tmp/b.log 2>&1
  echo "== next prompt=$P round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt; grep -E "prefill_" /tmp/b.log | tee -a $OUT/ab.txt
done; done
quantize_q4km
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
for R in 1 2; do for P in 3 4; do
  [ $(( $(date +%s)-S )) -lt 540 ] || break
  STRATA_PROMPT_Q8_PAIRS_PER_EXPERT=$P timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 16 --repeats 1 \
    --speculative-config "$SPEC" --prefill-lens 64 > /tmp/b.log 2>&1
  echo "== q4km c16 spec prompt=$P round $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt
  grep -E "strata_c|prefill_" /tmp/b.log | cut -c1-160 | tee -a $OUT/ab.txt
done; done
