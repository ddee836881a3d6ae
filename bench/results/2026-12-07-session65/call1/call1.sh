# Session 65 (~9 minutes, any card): mixed graph layouts (e0d7a0e: fresh prompts beside decode or verification
# windows replay one graph, where two read the weights twice). Their GPU tests first (token identity against eager,
# both ways: one mixed graph and STRATA_SPLIT_MIXED_STEPS=1), the planned-ahead ones, then issue 29's speculation at
# 4 streams (Qwen4-Exp 4L, two repeats) with mixed graphs and with the split as before.
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests mixed 200 tests/runner/test_cuda_graphs.py tests/spec/test_verify_ahead.py -k "fresh_prompts or ahead or qwen4"
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
spec_c4 q4e_mixed src "$Q4E" 150
export STRATA_SPLIT_MIXED_STEPS=1; spec_c4 q4e_split src "$Q4E" 110; unset STRATA_SPLIT_MIXED_STEPS
[ $(( $(date +%s)-S )) -lt 440 ] && spec_c4 q4e_mixed_hold2 src "$Q4E" 110 --admission-hold-steps 2
python3 - <<'PY' | tee -a $OUT/ab.txt
import glob, json, os
for path in sorted(glob.glob(os.environ["OUT"] + "/q4e_*.json")):
    for name, arm in sorted(json.load(open(path)).get("results", {}).items()):
        for run in arm.get("runs", []) if isinstance(arm, dict) else []:
            split = {k: (v["num_steps"], round(v["wall"], 2)) for k, v in run.get("step_split_ms", {}).items()}
            print(os.path.basename(path), name, round(run["output_tok_s"], 1), run.get("graph_steps"), split)
PY
