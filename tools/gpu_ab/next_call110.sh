# Prepared in session 70 (~10 minutes, any card; the in-place read is the default since session 71, a GGUF table copied off its map since session 72): the PLE table read in place on the path real
# users run, a GGUF file whose table stays the file's blocks in host memory. Qwen4-Exp 4L quantized to Q4_K_M with a
# smaller table (ngram_vocab_size_base 2M: 5.1 G values, Q5_0 rows of 160, ~3.5 GB in the file), then issue 29's
# speculation command at 4 streams from it with the host gather between graph parts (off) and read in place (on).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
EXPQ='random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=2000000'
timeout -s INT 240 python3 -m strata.cli.main quantize "$EXPQ" /tmp/expq.gguf --scheme q4_k_m --device cuda \
  > $OUT/quant.log 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/quant.log; ls -la /tmp/expq.gguf
STRATA_PLE_IN_PLACE=0 spec_c4 expq_off_1 src /tmp/expq.gguf 170
spec_c4 expq_on_1 src /tmp/expq.gguf 140
grep -h "page-locked\|cudaHostRegister" /tmp/expq_on_1.log | tee -a $OUT/ab.txt
[ $(( $(date +%s)-S )) -lt 470 ] && STRATA_PLE_IN_PLACE=0 spec_c4 expq_off_2 src /tmp/expq.gguf 120
runs_table "expq_*.json"
