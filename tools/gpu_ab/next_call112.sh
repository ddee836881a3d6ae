# Prepared in session 72 (~8 minutes; run under a 600 s limit). On an H200: issue 23's c1 / c8 / c16 and 512-token
# prefill (30B-A3B 24L Q4_K_M; targets 740 / 2,200 / 2,200 / 18,000; session 66: 730.2 / 2,181.2 / 2,901.0 /
# 20,615.1), the offload command at 25 % (150; 144.7), then where a 64-token prompt's ~11.5 ms goes
# (prompt_step_prof.py: 1-token generates at 64 / 512 tokens, a profiled 64-token prompt's kernels), then c1 again.
# On an H100: next_call110.sh's Qwen4-Exp Q4_K_M table A/B, then the same prompt profile.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
left() { echo $(( $1 - ($(date +%s)-S) )); }
prof_q4km() {
  PROMPT_LENS=64,512 PROF_LEN=64 timeout -s INT $1 python3 prompt_step_prof.py /tmp/q4km.gguf > $OUT/prof.log 2>&1
  echo "== prof rc=$? t=$(( $(date +%s)-S ))"; grep -v "^\s*$" $OUT/prof.log | grep -E "ms a|us " | head -32 | cut -c1-170
}
if nvidia-smi -L | grep -q H200; then
  quantize_q4km
  issue23 150
  [ $(left 480) -gt 80 ] && timeout -s INT 80 python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 \
    --cpu-threads 16 --expert-swap-interval 0 --repeats 3 --expert-cache 25% --output $OUT/off25.json \
    > $OUT/off25.log 2>&1
  echo "== offload 25% rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/off25.log | cut -c1-170
  [ $(left 540) -gt 40 ] && prof_q4km $(( $(left 540) < 90 ? $(left 540) : 90 ))
  [ $(left 560) -gt 40 ] && timeout -s INT $(left 560) python3 -m strata.cli.main bench offline /tmp/q4km.gguf \
    --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1 \
    --repeats 2 --output $OUT/q4km_c1.json > $OUT/q4km_c1.log 2>&1
  echo "== c1 again rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4km_c1.log | cut -c1-170
  exit 0
fi
EXPQ='random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=2000000'
timeout -s INT 200 python3 -m strata.cli.main quantize "$EXPQ" /tmp/expq.gguf --scheme q4_k_m --device cuda \
  > $OUT/quant.log 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/quant.log; ls -la /tmp/expq.gguf
spec_c4 expq_on_1 src /tmp/expq.gguf $(( $(left 420) < 150 ? $(left 420) : 150 ))
grep -h "page-locked\|PLE table" /tmp/expq_on_1.log | tee -a $OUT/ab.txt
[ $(left 560) -gt 90 ] && STRATA_PLE_IN_PLACE=0 spec_c4 expq_off_1 src /tmp/expq.gguf $(( $(left 560) < 150 ? $(left 560) : 150 ))
runs_table "expq_*.json"
rm -f /tmp/expq.gguf
[ $(left 560) -gt 80 ] && quantize_q4km && [ $(left 570) -gt 40 ] && prof_q4km $(left 570)
exit 0
