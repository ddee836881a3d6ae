export PYTHONUNBUFFERED=1
rm -rf .base/strata
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
export PYTHONPATH=$PWD:/tmp/site:/tmp/hf
echo "== GPU tests"; timeout 130 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_cuda_graphs.py -k "verification_windows or on_off or beside" tests/spec > $OUT/gpu_tests.log 2>&1; echo rc=$?; tail -5 $OUT/gpu_tests.log | cut -c1-300
echo "== spec bench"; timeout 200 python3 -m strata.cli.main bench offline 'random:qwen3-next-80b-a3b?num_hidden_layers=8' --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 --repeats 2 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' --spec-baseline --output $OUT/next80_spec_split.json > $OUT/next80_spec_split.log 2>&1; echo rc=$?; grep -E "strata_.*spec" $OUT/next80_spec_split.log | tail -3
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/next80_spec_split.json"))
for name, r in d["results"].items():
    for run in r.get("runs", []):
        s = run.get("step_split_ms", {})
        print(name, run["steps"], {k: (v.get("num_steps"), round(v.get("wall", 0), 2), round(v.get("forward", 0), 2), round(v.get("sample", 0), 2)) for k, v in s.items()})
PY
