# Call 2 (same machine start as call 1, run from the repository root with carry [".whl", ".base"]): two more
# alternated rounds of the offload command at 25 % with the AVX-512 and the AVX2 CPU kernel tables, then
# tools/gpu_ab/next_call110.sh under a 300 s limit (it stopped after its third arm: expq_on_2 did not run).
S=$(date +%s); source tools/gpu_ab/device_setup.sh > /dev/null 2>&1; cd /tmp/src; ls /tmp/q4km.gguf > /dev/null 2>&1 || quantize_q4km; for R in 2 3; do offload25 off25_avx512_r$R 60; STRATA_CPU_QUANT_ISA=avx2 offload25 off25_avx2_r$R 60; done 2>&1 | tee $OUT/off_ab.txt; cd - > /dev/null; timeout -k 10 -s INT 300 bash tools/gpu_ab/next_call110.sh > $OUT/call110.txt 2>&1; tail -30 $OUT/call110.txt
