# Session 29, device call 4 (carry [".whl", ".base"]): where the gated MoE sums part from torch (gate_diag.py) and their
# kernel tests after the fix (an IEEE multiply the compiler cannot fuse into a bf16 FMA), then
# issue 29's Q4_K_M bench with the LM head's new one-row tiling (16 rows a program, 2 warps).
# Then the host side of the bench loop at 8 streams on Qwen3-Next (bench_prof.py), as long as the call has time.
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
timeout -s INT 60 python3 gate_diag.py > $OUT/gate_diag.txt 2>&1; cat $OUT/gate_diag.txt | head -20
timeout -s INT 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_fused_ops.py -k "topk_sum" > $OUT/tests.log 2>&1; tail -3 $OUT/tests.log
timeout -s INT 60 python3 -m strata.cli.main quantize 'random:qwen4exp-125b?num_hidden_layers=4&ple_layer_ids=none' /tmp/q4e.gguf --scheme q4_k_m --device cuda > /dev/null 2>&1
timeout -s INT 120 python3 -m strata.cli.main bench offline /tmp/q4e.gguf --device cuda --max-model-len 4096 --num-prompts 16 \
  --input-len 128 --output-len 128 --repeats 1 --concurrency 1,8,16 --output $OUT/q4e.json > $OUT/q4e.log 2>&1
echo "== issue 29 Q4_K_M bench rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c" $OUT/q4e.log | tail -3 | cut -c1-160
LEFT=$(( 330 - ($(date +%s)-S) ))
[ $LEFT -gt 60 ] && timeout -s INT $LEFT python3 bench_prof.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' 8 > $OUT/bench_prof_next_c8.txt 2>&1
echo "== bench_prof rc=$? t=$(( $(date +%s)-S ))"; grep "=====" $OUT/bench_prof_next_c8.txt | cut -c1-300
