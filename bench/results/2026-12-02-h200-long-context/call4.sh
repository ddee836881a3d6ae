export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cd /tmp/src
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf
M='random:qwen3-next-80b-a3b?num_hidden_layers=8'
S=$(date +%s)
echo "== attn tests"; timeout -s INT 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_kernels.py -k "paged_attention" --tb=line > $OUT/t_attn.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "^(FAILED|ERROR)|passed|failed|^/" $OUT/t_attn.log | head -8 | cut -c1-250
LC="--concurrency 1 --num-prompts 1 --input-len 64 --output-len 64 --warmup-output-len 0 --max-model-len 131136"
echo "== 24GB"; timeout -s INT 170 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --repeats 1 --gpu-memory-limit-mib 24576 --decode-contexts 4096,131072 --output $OUT/long_24g.json > $OUT/long_24g.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -vE "^\s*$" $OUT/long_24g.log | grep -E "decode_at|rror|expert|total|KV|Interrupt|File" | tail -14 | cut -c1-250
echo "== long bf16 x2"; timeout -s INT 95 python3 -m strata.cli.main bench offline "$M" --device cuda $LC --repeats 2 --decode-contexts 4096,32768,131072 --output $OUT/long_bf16_r2.json > $OUT/long_bf16_r2.log 2>&1; echo rc=$? t=$(( $(date +%s)-S )); grep -E "decode_at|rror" $OUT/long_bf16_r2.log | tail -4 | cut -c1-250
