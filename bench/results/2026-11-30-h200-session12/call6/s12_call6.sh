# session 12, call 6: back to 34e088b's MoE kernels (call 4's code): one c1 bench on call 5's machine
S="python3 -m strata.cli.main bench"; M='random:qwen3-30b-a3b?num_hidden_layers=24'
timeout 100 $S offline "$M" --device cuda --max-model-len 4096 --num-prompts 4 --input-len 64 --output-len 128 --concurrency 1 --repeats 1 --output $OUT/decode_c1.json > $OUT/bench_c1.log 2>&1; echo rc=$?
python3 -c "
import json
d=json.load(open('$OUT/decode_c1.json')); a=d['results']['strata_c1']
print('c1', round(a['median_output_tok_s'],1), 'step', round(a['median_decode_step_ms'],4), 'frac', round(a['median_bandwidth_fraction'],4), 'copy', round(d['roofline']['device_copy_bandwidth_bytes_s']/1e12,3))"
