# session 10, call 3: dependent loads issued together (moe, attention split/merge, rope_kv, rms_norm), float32 logits from the GEMM
export PYTHONPATH=$PWD:$PWD/.devscripts PYTHONUNBUFFERED=1
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
echo "== tests"; timeout 170 python3 -m pytest -q -m gpu tests/kernels/test_fused_ops.py tests/kernels/test_kernels.py -k "rms or rope or attention or moe or fold or routing or topk" -p no:cacheprovider -x > $OUT/tests.log 2>&1; echo "rc=$?"
grep -v "^  \|^$" $OUT/tests.log | grep "FAILED\|passed\|failed\|Error" | tail -8
echo "== tune"; TAG=3 timeout 200 python3 .devscripts/s10_tune.py "$(cat .devscripts/s10_variants3.json)" 3 > $OUT/tune3.log 2>&1; echo rc=$?
tail -10 $OUT/tune3.log
echo "== bench c1"; for i in 1 2; do timeout 60 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1_$i.json > $OUT/bench_c1_$i.log 2>&1; echo rc=$?; done
for f in $OUT/decode_c1_*.json; do python3 -c "
import json
d=json.load(open('$f')); a=d['results']['strata_c1']
print('$(basename $f)', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"; done
