# Session 38, call 2: packed_mmq (int8 tensor-core grouped MoE) as the prompt path of Q4_K / Q6_K experts.
# 1. its tilings against the float grouped kernels at 128-512 tokens (30B-A3B and Qwen3-Next-80B experts);
# 2. Nsight Compute on one 512-token call of each (where the time goes inside the kernels);
# 3. issue 23's Q4_K_M prefill with the mmq dispatch on / off (STRATA_NO_GROUPED_Q8), alternated.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
GROUPED_ARMS=mmq PROMPT_TOKENS=128,256,512 timeout -s INT 200 python3 prompt_moe_ab.py > $OUT/mmq_sweep.txt 2>&1
echo "== sweep rc=$? t=$(( $(date +%s)-S ))"; grep -E "tokens|failed" $OUT/mmq_sweep.txt | cut -c1-700
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo "ncu: $NCU"
for ARM in grouped mmq; do
  timeout -s INT 100 $NCU --clock-control none --profile-from-start off --set full --import-source no \
    -o /tmp/ncu_$ARM -f python3 ncu_moe.py $ARM > /tmp/ncu_$ARM.log 2>&1; echo "== ncu $ARM rc=$? t=$(( $(date +%s)-S ))"
  tail -3 /tmp/ncu_$ARM.log | cut -c1-300
  $NCU --import /tmp/ncu_$ARM.ncu-rep --page details > $OUT/ncu_${ARM}_details.txt 2>&1
  $NCU --import /tmp/ncu_$ARM.ncu-rep --page source --csv --print-source sass > /tmp/src_$ARM.csv 2>&1
  head -c 400 /tmp/src_$ARM.csv; echo
  python3 ncu_top.py 40 < /tmp/src_$ARM.csv > $OUT/ncu_${ARM}_top.txt 2>&1; head -50 $OUT/ncu_${ARM}_top.txt | cut -c1-160
  gzip -c /tmp/src_$ARM.csv > $OUT/ncu_${ARM}_sass.csv.gz
done
grep -E "^  [a-z_]+kernel|Duration|Memory Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Local Memory|One or More Eligible|Issued Warp" \
  $OUT/ncu_*_details.txt | cut -c1-200
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf --scheme q4_k_m \
  --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
for R in a b; do for OFF in 1 0; do
  STRATA_NO_GROUPED_Q8=$OFF timeout -s INT 60 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda \
    --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 16 --concurrency 1 --repeats 1 --prefill-lens 128,512 \
    > /tmp/pf.log 2>&1
  echo "== no_grouped_q8=$OFF $R rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/prefill_mmq.log; cat /tmp/pf.log >> $OUT/prefill_mmq.log
  grep prefill_ /tmp/pf.log | cut -c1-120
done; done
