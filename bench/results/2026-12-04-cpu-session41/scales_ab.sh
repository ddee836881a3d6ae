# One-row CPU kernel A/B, one thread, weights cached: quant_simd.c before 2507e83 (Q4_K scales in general registers,
# one broadcast each) against HEAD (byte shuffles), three alternated rounds; min / median of 1,000 calls.
# usage (repository root, .venv set up): bash bench/results/2026-12-04-cpu-session41/scales_ab.sh
D=bench/results/2026-12-04-cpu-session41
git show 2507e83~1:strata/kernels/native/quant_simd.c > /tmp/qs.before.c
cp strata/kernels/native/quant_simd.c /tmp/qs.head.c
for round in 1 2 3; do
  for arm in before head; do
    cp /tmp/qs.$arm.c strata/kernels/native/quant_simd.c
    echo "$arm: $(.venv/bin/python $D/kernel_rows.py 1000)"
  done
done
cp /tmp/qs.head.c strata/kernels/native/quant_simd.c
