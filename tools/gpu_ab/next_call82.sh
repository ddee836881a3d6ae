# Session 63 (~9 minutes, any card): the one-launch roll-back's GPU tests (ef6a9cd) with the verification ahead and
# graph identity tests of the hybrid families, then MTP and suffix drafts in verification steps planned ahead (STRATA_DRAFTS_AHEAD=1)
# against one step at a time (the default), issue 28's model (Qwen3-Next 8L bf16, its random MTP layer), 32 prompts of
# 64 tokens, 128 out, at 1 and 4 streams, each arm its own process, two alternated rounds:
# - MTP with k fixed at 3 (adaptive off): a random head is rarely right, so this times a window's overhead (every
#   step verifies 4 rows and emits ~1 token; the ahead arm launches step N + 1 before reading N);
# - suffix drafts with the default policy (a random model's greedy output repeats itself, so suffixes match).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
nvidia-smi -L
source tools/gpu_ab/device_setup.sh
S=$(date +%s)
run_tests rollback 150 tests/kernels/test_state_rollback.py tests/spec/test_verify_ahead.py \
  tests/runner/test_cuda_graphs.py -k "rollback or ahead or graph_on_off_token_identity or fresh_prompts"
NEXT='random:qwen3-next-80b-a3b?num_hidden_layers=8'
arm() {  # NAME AHEAD SPEC SECONDS [EXTRA ARGS...]
  local name=$1 ahead=$2 spec=$3 secs=$4; shift 4
  STRATA_DRAFTS_AHEAD=$ahead timeout -s INT $secs python3 -m strata.cli.main bench offline "$NEXT" --device cuda \
    --max-model-len 4096 --num-prompts 32 --input-len 64 --output-len 128 --concurrency 1,4 --repeats 1 \
    --speculative-config "$spec" --output $OUT/$name.json "$@" > /tmp/$name.log 2>&1
  echo "== $name rc=$? t=$(( $(date +%s)-S ))" | tee -a $OUT/ab.txt
  grep -E "strata_|accepted" /tmp/$name.log | cut -c1-220 | tee -a $OUT/ab.txt
  tail -3 /tmp/$name.log | grep -i -E "error|Traceback" | tee -a $OUT/ab.txt
}
MTP3='{"method":"mtp","num_speculative_tokens":3,"adaptive":false}'
SUFFIX='{"method":"suffix","num_speculative_tokens":3}'
arm mtp3_ahead_r1 1 "$MTP3" 150  # the first pays Triton's compiles
arm mtp3_step_r1 0 "$MTP3" 70
arm suffix_ahead_r1 1 "$SUFFIX" 60
arm suffix_step_r1 0 "$SUFFIX" 60
arm mtp3_step_r2 0 "$MTP3" 70
arm mtp3_ahead_r2 1 "$MTP3" 70
[ $(( $(date +%s)-S )) -lt 470 ] && arm suffix_step_r2 0 "$SUFFIX" 60
python3 - <<'EOF' | tee -a $OUT/ab.txt
import glob, json, os
for path in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    data = json.load(open(path))
    for key, arm in sorted(data.get("results", data).items()) if isinstance(data, dict) else []:
        if isinstance(arm, dict) and "runs" in arm:
            run = arm["runs"][0]
            print(os.path.basename(path), key, round(run.get("output_tok_s", 0), 1), "accepted",
                  run.get("mean_accepted_length"), "window", run.get("mean_window_tokens"), "steps", run.get("steps"))
EOF
