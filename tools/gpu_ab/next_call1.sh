# Prepared in session 34 for the next session's first device call (carry [".whl", ".base"]; device_setup.sh says how
# to build .base/src.tar). Not yet run on a GPU: MTP drafts in verification steps planned ahead (STRATA_DRAFTS_AHEAD=1),
# i-quant models end to end on CUDA (packed experts / linears). Then where a planned-ahead step's time goes at one
# stream (spec_timeline: session 34 saw 1.23 ms of launch host time a step at c1), and issue 28's speculation sweep.
# (The packed_q8 changes of branch s34-packed-q8 are next_call2.sh's, from an archive of that branch.)
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
SPEC='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}'
timeout -s INT 160 python3 -m pytest -q -m gpu -p no:cacheprovider tests/spec/test_verify_ahead.py tests/kernels/test_packed_moe.py \
  tests/experts/test_packed_experts.py tests/weights/test_packed_gguf.py --tb=short > $OUT/tests_ahead.log 2>&1
echo "== ahead/iq tests rc=$? t=$(( $(date +%s)-S ))"; grep -E "FAILED|ERROR|passed|failed" $OUT/tests_ahead.log | head -12 | cut -c1-200
timeout -s INT 100 python3 spec_timeline.py 'random:qwen3-next-80b-a3b?num_hidden_layers=8' - 1 > $OUT/tl_next.txt 2>&1
echo "== timeline rc=$? t=$(( $(date +%s)-S ))"; grep -E "=====|device span|Python" $OUT/tl_next.txt | cut -c1-200
LEFT=$(( 570 - ($(date +%s)-S) ))
timeout -s INT $LEFT python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda \
  --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,2,4,8,16,32 --repeats 1 \
  --speculative-config "$SPEC" --spec-baseline --output $OUT/next80_spec.json > $OUT/next80_spec.log 2>&1
echo "== issue 28 spec rc=$? t=$(( $(date +%s)-S ))"; grep -E "tok/s|x " $OUT/next80_spec.log | tail -12 | cut -c1-200
