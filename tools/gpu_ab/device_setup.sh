# Sourced at the start of a device call (run from the carried working tree, carry [".whl", ".base"]):
# installs the carried wheels, unpacks the git archive .base/src.tar to /tmp/src (never the working tree,
# which may hold uncommitted edits), copies the A/B scripts beside it and enters it. Build the archive first:
#   git archive HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
export PYTHONUNBUFFERED=1 STRATA_COMMIT=$(cat .base/COMMIT)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hf .whl/hf/*.whl
mkdir -p /tmp/src && tar -xf .base/src.tar -C /tmp/src && cd /tmp/src && cp tools/gpu_ab/*.py .
export PYTHONPATH=/tmp/src:/tmp/site:/tmp/hf

# run_tests NAME SECONDS PYTEST_ARGS...: the GPU tests named, stopped (with pytest's summary) after SECONDS; the
# result line and any failures appended to $OUT/tests.txt. Needs S (the call's start, date +%s).
run_tests() {
  local name=$1 secs=$2; shift 2
  timeout -k 10 -s INT $secs python3 -m pytest -q -m gpu "$@" -p no:cacheprovider > /tmp/t.log 2>&1
  echo "== $name rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/tests.txt
  grep -E "^(FAILED|ERROR)|^E  |passed|failed" /tmp/t.log | tail -14 | cut -c1-400 | tee -a $OUT/tests.txt
}

# Issue 23's model, once a call: random:qwen3-30b-a3b?num_hidden_layers=24 at Q4_K_M in /tmp/q4km.gguf.
quantize_q4km() {
  timeout -k 10 -s INT 60 python3 -m strata.cli.main quantize 'random:qwen3-30b-a3b?num_hidden_layers=24' /tmp/q4km.gguf \
    --scheme q4_k_m --device cuda > /dev/null 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"
}

# issue23 SECONDS [CONCURRENCY]: issue 23's bench of /tmp/q4km.gguf (16 prompts of 64 tokens, 128 out, c1 / c8 / c16 and
# the 512-token prefill by default), stopped after SECONDS; $OUT/q4km.json and .log, its summary lines shown. Needs S.
issue23() {
  timeout -k 10 -s INT $1 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 16 --input-len 64 --output-len 128 --concurrency ${2:-1,8,16} --repeats 1 \
    --output $OUT/q4km.json > $OUT/q4km.log 2>&1
  echo "== issue 23 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c|prefill" $OUT/q4km.log | cut -c1-170
}

# offload25 NAME SECONDS: issue 23's offload command on /tmp/q4km.gguf (25 % of the experts on the GPU, 16 CPU threads,
# 2 prompts of 64 tokens, 128 out, 3 repeats), stopped after SECONDS; $OUT/NAME.json and .log, its c1 line shown (the
# caller's environment applies: STRATA_CPU_QUANT_ISA=avx2 for the 256-bit CPU kernels). Needs S.
offload25() {
  timeout -k 10 -s INT $2 python3 -m strata.cli.main bench offline /tmp/q4km.gguf --device cuda --max-model-len 4096 \
    --num-prompts 2 --input-len 64 --output-len 128 --concurrency 1 --cpu-threads 16 --expert-swap-interval 0 \
    --repeats 3 --expert-cache 25% --output $OUT/$1.json > $OUT/$1.log 2>&1
  echo "== $1 rc=$? t=$(( $(date +%s)-S ))"; grep -E "strata_c1" $OUT/$1.log | cut -c1-170
}

# bench_arms ROUNDS CONCURRENCY TREE...: issue 23's bench of /tmp/q4km.gguf from each tree /tmp/TREE in turn, ROUNDS
# alternated rounds, each run's JSON kept as $OUT/TREE_rN.json and its summary lines in $OUT/ab.txt.
bench_arms() {
  local rounds=$1 concurrency=$2; shift 2
  for R in $(seq 1 "$rounds"); do for T in "$@"; do
    (cd /tmp/$T && PYTHONPATH=/tmp/$T:/tmp/site:/tmp/hf timeout -k 10 -s INT 100 python3 -m strata.cli.main bench offline \
      /tmp/q4km.gguf --device cuda --max-model-len 4096 --num-prompts 16 --input-len 64 --output-len 128 \
      --concurrency "$concurrency" --repeats 1 --output $OUT/${T}_r$R.json > /tmp/b_$T.log 2>&1)
    echo "== $T round $R rc=$? t=$(( $(date +%s)-S ))" >> $OUT/ab.txt; grep -E "strata_c" /tmp/b_$T.log >> $OUT/ab.txt
  done; done
  cut -c1-120 $OUT/ab.txt
}

# spec_c4 NAME TREE MODEL SECONDS [EXTRA ARGS...]: the issues' speculation command (synthetic L = 3, k = 3, 32 prompts
# of 64 tokens, 128 out, 4 streams, two repeats, against none) on MODEL from the tree /tmp/TREE, stopped after
# SECONDS; the JSON kept as $OUT/NAME.json, its summary lines in $OUT/ab.txt. Needs S.
spec_c4() {
  local name=$1 tree=$2 model=$3 secs=$4; shift 4
  (cd /tmp/$tree && PYTHONPATH=/tmp/$tree:/tmp/site:/tmp/hf timeout -k 10 -s INT $secs python3 -m strata.cli.main bench offline \
    "$model" --device cuda --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 4 \
    --repeats 2 --speculative-config '{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3}' \
    --spec-baseline --output $OUT/$name.json "$@" > /tmp/$name.log 2>&1)
  local rc=$?; echo "== $name rc=$rc t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt
  [ $rc = 0 ] || tail -4 /tmp/$name.log >> $OUT/ab.txt
  grep -E "strata_" /tmp/$name.log | cut -c1-200 | tee -a $OUT/ab.txt
}

# runs_table GLOB: each bench JSON under $OUT matching GLOB, one line a run (arm, tok/s, wall and step seconds, the
# step split's steps and ms a step, graph steps), appended to $OUT/ab.txt.
runs_table() {
  GLOB="$1" python3 - <<'PY' | tee -a $OUT/ab.txt
import glob, json, os
for path in sorted(glob.glob(os.path.join(os.environ["OUT"], os.environ["GLOB"]))):
    for name, arm in sorted(json.load(open(path)).get("results", {}).items()):
        for run in arm.get("runs", []) if isinstance(arm, dict) else []:
            split = {k: (v["num_steps"], round(v["wall"], 2)) for k, v in run.get("step_split_ms", {}).items()}
            print(os.path.basename(path), name, round(run["output_tok_s"], 1), round(run["seconds"], 4),
                  round(run["step_seconds_total"], 4), split, run.get("graph_steps"))
PY
}
