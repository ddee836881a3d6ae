# session 8, call 4: joint graph (windows + a fresh prompt), norm folded into one-token routing: tests, c1 A/B, synthetic 2.0/3.0 c1-32, decode, mtp
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
echo "== tests"; timeout 170 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py tests/runner/test_cuda_graphs.py tests/engine/test_async_scheduling.py -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed" | tail -8
for arm in fold nofold fold nofold; do
  case $arm in fold) E="";; nofold) E="STRATA_NO_NORM_IN_ROUTING=1";; esac
  env $E timeout 50 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$arm.$RANDOM.json > /dev/null 2>&1
done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
echo "== synthetic 2.0 c1-32"; timeout 90 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic20.json 2>&1 | $F | tail -12
echo "== synthetic 3.0 c1-32"; timeout 90 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 64 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic30.json 2>&1 | $F | tail -12
echo "== decode"; timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -3
echo "== mtp qwen3-next c1-32"; timeout 120 $S offline 'random:qwen3-next-80b-a3b?num_hidden_layers=24' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 32 --concurrency 1,2,4,8,16,32 --repeats 1 --speculative-config '{"method":"mtp","num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_mtp.json 2>&1 | $F | tail -12
