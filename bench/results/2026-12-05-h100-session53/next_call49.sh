# For a later session (prepared in session 52, ~3 minutes; the device host's CPU only, no GPU work): the i-quants'
# CPU kernels where the offload targets are measured. Session 52 measured them on the development VM's Zen 4 only:
# with AVX-512 VBMI (iquant_vbmi.c) IQ2_XXS / IQ3_XXS / IQ3_S pairs took 1.45x / 2.0x / 2.3x less time than the
# AVX-512 kernels; an Intel host's 512-bit permutes (one port) may give less. Prints whether this host has VBMI,
# then tools/cpu_moe_types.py by ISA (avx512 against the best), one thread and a decode row's 6 pairs on 16 threads.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
lscpu | grep -E "Model name|^CPU\(s\)"; grep -o -w -E "avx512vbmi|avx512_vnni|avx512bw|amx_int8" /proc/cpuinfo | sort | uniq -c
python3 -c "from strata.kernels import cpu_quant; print('isas', cpu_quant.available_isas())"
for R in 1 2; do for ISA in avx512 best; do
  timeout -s INT 150 python3 tools/cpu_moe_types.py IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S,Q4_K $ISA 16 \
    | tee -a $OUT/cpu_moe_types.txt
done; done
echo "== t=$(( $(date +%s)-S ))"
