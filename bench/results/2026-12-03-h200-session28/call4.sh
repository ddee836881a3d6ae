# Session 28 call 4: the two graph identity tests whose stale assertion stopped them in call 3; issue 29's
# Qwen4-Exp Q4_K_M bench at HEAD; a host profile of qwen3-next's 8-stream decode (issue 28's c8); issue 29's bf16 Qwen4-Exp bench at HEAD.
B=$PWD; source tools/gpu_ab/device_setup.sh; mkdir -p /tmp/base && tar -xf $B/.base/base.tar -C /tmp/base
S=$(date +%s)
timeout -s INT 80 python3 -m pytest -v -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py --tb=short \
  -k "graph_on_off_token_identity and (spec4 or spec5)" > $OUT/tests.log 2>&1
echo "== tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests.log | cut -c1-200
bench() {  # arm model tag
  if [ $1 = base ]; then D=/tmp/base; else D=/tmp/src; fi
  (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/hf timeout -s INT 100 python3 -m strata.cli.main bench offline $2 \
    --device cuda --max-model-len 4096 --num-prompts 16 --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 \
    --output $OUT/$3_$1.json > $OUT/$3_$1.log 2>&1)
  echo "== $3 $1 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/$3_$1.log | tail -3 | cut -c1-110
}
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
bench new /tmp/q4e.gguf q4e
timeout -s INT 90 python3 host_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' plain streams=8 > $OUT/host_prof_next_c8.txt 2>&1
echo "== host_prof c8 rc=$? t=$(( $(date +%s)-S ))"; grep "=====" $OUT/host_prof_next_c8.txt | cut -c1-400
bench new 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' q4e_bf16
