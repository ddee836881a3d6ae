# Session 65 (~8 minutes, any card): where speculation's decode steps go at 4 streams (issue 29, Qwen4-Exp 4L, two
# repeats). Session 65's H100 runs took 381-387 decode steps where the CPU scheduler, fed the same synthetic
# acceptance with k fixed at 3, takes 345 (bench/results/2026-12-07-cpu-session65/hold_sim.py): the adaptive draft
# length (on by default) is the suspect (retries of short windows; mean window 3.72-3.93 tokens). Arms: the default,
# k fixed at 3 ("adaptive": false), and each with an admission hold of 2 steps. The runs' step_split_ms now carries
# tokens_per_step and slots_per_step (busy slots, window rows).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
Q4E='random:qwen4exp-125b?num_hidden_layers=4'
FIXED='{"method":"synthetic","acceptance_length":3.0,"num_speculative_tokens":3,"adaptive":false}'
spec_c4 q4e_default src "$Q4E" 160
spec_c4 q4e_fixed src "$Q4E" 110 --speculative-config "$FIXED"
spec_c4 q4e_fixed_hold2 src "$Q4E" 110 --speculative-config "$FIXED" --admission-hold-steps 2
[ $(( $(date +%s)-S )) -lt 440 ] && spec_c4 q4e_hold2 src "$Q4E" 110 --admission-hold-steps 2
python3 - <<'PY' | tee -a $OUT/ab.txt
import glob, json, os
for path in sorted(glob.glob(os.environ["OUT"] + "/q4e_*.json")):
    for name, arm in sorted(json.load(open(path)).get("results", {}).items()):
        for run in arm.get("runs", []) if isinstance(arm, dict) else []:
            split = {k: (v["num_steps"], round(v["wall"], 2), round(v.get("tokens_per_step", 0), 2),
                         round(v.get("slots_per_step", 0), 2)) for k, v in run.get("step_split_ms", {}).items()}
            print(os.path.basename(path), name, round(run["output_tok_s"], 1), run.get("mean_window_tokens"), split)
PY
