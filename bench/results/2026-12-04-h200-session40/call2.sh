# Session 40, call 2: (1) offload_check.py at HEAD and at 7376f35 on the same Q4_K_M file: greedy tokens with 25 % of
# the experts on the GPU against all of them, and the ids the offloaded layers' host parts saw (call 1: 7376f35 had CPU
# pairs in 260 of 1,536 layer steps, HEAD in all); (2) linear_q8 with SPLIT_K on the 30B's attention projections.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 45 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
  --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
timeout -s INT 110 python3 offload_check.py /tmp/q4km.gguf > $OUT/check_head.txt 2>&1
echo "== check HEAD rc=$? t=$(( $(date +%s)-S ))"; grep -vE "^\s*$" $OUT/check_head.txt | tail -8 | cut -c1-400
D=/tmp/old; mkdir -p $D && tar -xzf $OLDPWD/.base/bis/7376f35.tgz -C $D && cp offload_check.py $D/
(cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 150 python3 offload_check.py /tmp/q4km.gguf) > $OUT/check_7376f35.txt 2>&1
echo "== check 7376f35 rc=$? t=$(( $(date +%s)-S ))"; grep -vE "^\s*$" $OUT/check_7376f35.txt | tail -8 | cut -c1-400
LINEAR_SHAPES=30b_q_proj,30b_o_proj,30b_v_proj LINEAR_ROWS=5,8,16 timeout -s INT 180 python3 linear_mmq_ab.py \
  > $OUT/linear_split_k.txt 2>&1
echo "== linear ab rc=$? t=$(( $(date +%s)-S ))"; cut -c1-300 $OUT/linear_split_k.txt | tail -40
