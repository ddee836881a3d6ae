# Session 50, call 3 (~7 minutes): packed_q8's GEMV tilings at 8 / 16 rows against dequantize + GEMM on the 30B-A3B's
# attention projections (gemv_rows_sweep.py), then issue 23's c8 with the GEMV taking narrow weights up to 8 rows
# (NARROW_MAX_ROWS 4 -> 8, default_config's tiling) against HEAD, alternated twice.
# Build the archive first:  git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 300 python3 gemv_rows_sweep.py > $OUT/gemv_rows_sweep.txt 2>&1; echo "== sweep rc=$? t=$(( $(date +%s)-S ))"
cat $OUT/gemv_rows_sweep.txt | grep rows
mkdir -p /tmp/n8 && tar -xf $OLDPWD/.base/src.tar -C /tmp/n8
sed -i 's/^NARROW_MAX_ROWS = 4$/NARROW_MAX_ROWS = 8/' /tmp/n8/strata/kernels/packed_q8.py
grep -c "^NARROW_MAX_ROWS = 8" /tmp/n8/strata/kernels/packed_q8.py
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in 1 2; do for T in src n8; do
  (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -s INT 80 python3 -m strata.cli.main bench offline \
    /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
    --concurrency 8 --repeats 1 > /tmp/c8_$T.log 2>&1)
  echo "== c8 $T round $R rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c8" /tmp/c8_$T.log | cut -c1-120
done; done
# Nsight Compute on the 8-bit pairs at one token (a one-stream decode step's MoE: ~20 us a layer, ~1.1 TB/s by bytes)
# and at 64 tokens (a 64-token prompt's: ~550 us a layer, most of issue 23's 17 ms TTFT at one stream)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for TOK in 1 64; do
  TOKENS=$TOK timeout -s INT 100 $NCU --clock-control none --profile-from-start off --set full --import-source no \
    -o /tmp/ncu_p$TOK -f python3 ncu_moe.py pairs > /tmp/ncu_p$TOK.log 2>&1; echo "== ncu pairs $TOK rc=$? t=$(( $(date +%s)-S ))"
  $NCU --import /tmp/ncu_p$TOK.ncu-rep --page details > $OUT/ncu_pairs${TOK}_details.txt 2>&1
  $NCU --import /tmp/ncu_p$TOK.ncu-rep --page source --csv --print-source sass > /tmp/src_p$TOK.csv 2>&1
  python3 ncu_top.py 25 < /tmp/src_p$TOK.csv > $OUT/ncu_pairs${TOK}_top.txt 2>&1
  grep -E "^  [_a-z]+kernel|Duration|Memory Throughput|DRAM Throughput|L2 Hit|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|One or More Eligible|Issued Warp" \
    $OUT/ncu_pairs${TOK}_details.txt | cut -c1-160 | head -40
done
