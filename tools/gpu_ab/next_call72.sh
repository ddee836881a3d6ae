# Session 58 (~4 minutes): packed_mmq's quant bytes unpacked four at a time in inline PTX (STRATA_MMQ_WORD_UNPACK=1,
# off by default until this call: sm_90 SASS of the Q4_K gate/up 2,912 -> 2,504 instructions, Q4_K down 1,464 ->
# 1,256, Q6_K down 2,536 -> 2,320 with its 72 bytes of stack gone). First its GPU tests (both settings), then
# mmq_prompt_ab.py with it off and on, alternated, two rounds. If the tests pass and it is faster: default it on.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
nvidia-smi -L
run_tests mmq_words 150 -n 4 tests/kernels/test_packed_mmq.py
for R in 1 2; do for F in 0 1; do
  STRATA_MMQ_WORD_UNPACK=$F ARM=words=$F timeout -s INT 60 python3 mmq_prompt_ab.py >> $OUT/mmq_ab.txt 2>&1
  echo "== words=$F round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/mmq_ab.txt
done; done
sort -s -t, -k2,2 $OUT/mmq_ab.txt | cut -c1-160
