# session 7, call 5: skinny_linear A/B (preload / no preload / cuBLAS), GPU suite, decode c1/8/16, synthetic c4/c8
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
F='grep -v ^loaded\|Warn\|warn\|^KV\|^experts:'
for arm in preload nopreload cublas preload nopreload; do
  case $arm in cublas) E="STRATA_NO_SKINNY_LINEAR=1";; preload) E="";; nopreload) E="STRATA_X_NO_PRELOAD=1";; esac
  env $E timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$arm.$RANDOM.json > /dev/null 2>&1
done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json,sys
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
echo "== gpu suite"; timeout 230 python3 -m pytest -q -m gpu tests/engine tests/experts tests/kernels tests/runner tests/sample tests/spec -p no:cacheprovider > $OUT/gpu_suite.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/gpu_suite.log | tail -5
echo "== decode"; timeout 80 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 --concurrency 1,8,16 --repeats 1 --output $OUT/decode.json 2>&1 | $F | tail -3
echo "== synthetic 2.0 c4,c8"; timeout 80 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 96 --concurrency 4,8 --repeats 1 --speculative-config '{"method":"synthetic","acceptance_length":2.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/spec_synthetic20_c4c8.json 2>&1 | $F | tail -4
