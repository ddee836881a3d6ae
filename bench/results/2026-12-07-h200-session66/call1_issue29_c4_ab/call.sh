# Session 65 (~8 minutes, any card): the draft cost model's fix (a forgotten smaller size keeps its last time, so plain
# decoding is no longer retried on a 4x-optimistic guess after every wait) on issue 29 at 4 streams (Qwen4-Exp 4L,
# two repeats). Session 65's H100 runs took 381-387 decode steps where k fixed at 3 takes ~345; the CPU scheduler fed
# GPU-like step times reproduces it and the fix brings it to 344-347 (bench/results/2026-12-07-cpu-session65/).
# Arms: HEAD (adaptive, fixed), HEAD with k fixed at 3 ("adaptive": false), 8462e36 (adaptive, before the fix), then
# HEAD with an admission hold of 2 steps. The runs' step_split_ms carries tokens_per_step and slots_per_step.
# Build the archives first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > \
#   .base/COMMIT && git archive --format=tar.gz 8462e36 -o .base/prev.tar
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
mkdir -p /tmp/prev && tar -xf $OLDPWD/.base/prev.tar -C /tmp/prev
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
FIXED='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3,"adaptive":false}'
spec_c4 q4e_src src "$Q4E" 160
spec_c4 q4e_fixed_k src "$Q4E" 110 --speculative-config "$FIXED"
spec_c4 q4e_prev prev "$Q4E" 110
[ $(( $(date +%s)-S )) -lt 440 ] && spec_c4 q4e_src_hold2 src "$Q4E" 110 --admission-hold-steps 2
python3 - <<'PY' | tee -a $OUT/ab.txt
import glob, json, os
for path in sorted(glob.glob(os.environ["OUT"] + "/q4e_*.json")):
    for name, arm in sorted(json.load(open(path)).get("results", {}).items()):
        for run in arm.get("runs", []) if isinstance(arm, dict) else []:
            split = {k: (v["num_steps"], round(v["wall"], 2), round(v.get("tokens_per_step", 0), 2),
                         round(v.get("slots_per_step", 0), 2)) for k, v in run.get("step_split_ms", {}).items()}
            print(os.path.basename(path), name, round(run["output_tok_s"], 1), run.get("mean_window_tokens"), split)
PY
