# Prepared in session 72 (~3 minutes; run under a 230 s limit): a GGUF PLE table is now copied off the file's map
# into page-locked memory of its own (next_call112.sh's lock of the 3.5 GB map itself ran in the kernel for 12+
# minutes on an H100 host). Qwen4-Exp 2L at Q4_K_M with the big table
# (ngram_vocab_size_base 2M: Q5_0 rows) loaded on CUDA: the lock's time, and greedy tokens in place against the
# host gather (STRATA_PLE_IN_PLACE=0).
# Build the archive first:  git archive --format=tar.gz HEAD -o .base/src.tar && git rev-parse --short HEAD > .base/COMMIT
S=$(date +%s)
nvidia-smi -L | tee $OUT/gpu.txt
source tools/gpu_ab/device_setup.sh
# (the GPU tests of the in-place read: test_qwen4_exp_gguf -k in_place, test_sm_gather; left out for the budget)
EXPQ='random:qwen4exp-125b?num_hidden_layers=2&ngram_vocab_size_base=2000000'
timeout -k 5 -s INT 110 python3 -m strata.cli.main quantize "$EXPQ" /tmp/expq.gguf --scheme q4_k_m --device cuda \
  > $OUT/quant.log 2>&1; echo "== quant rc=$? t=$(( $(date +%s)-S ))"; tail -3 $OUT/quant.log
for ARM in 1 0; do
  STRATA_PLE_IN_PLACE=$ARM timeout -k 5 -s INT 70 python3 - > $OUT/load_$ARM.log 2>&1 <<'PY'
import time
from strata import LLM, SamplingParams
t = time.perf_counter()
llm = LLM("/tmp/expq.gguf", dtype="bfloat16", device="cuda", max_num_seqs=4, max_model_len=1024, quiet=False)
print(f"start {time.perf_counter() - t:.1f} s", flush=True)
prompts = [{"prompt_token_ids": [(s * 7919 + i * 104729) % 200000 + 100 for i in range(48)]} for s in range(4)]
t = time.perf_counter()
outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True))
print(f"generate {time.perf_counter() - t:.2f} s", flush=True)
print("TOKENS", [o.outputs[0].token_ids for o in outs])
PY
  echo "== load arm $ARM rc=$? t=$(( $(date +%s)-S ))"; grep -E "PLE|page-locked|start|generate|Error" $OUT/load_$ARM.log | cut -c1-200
done
python3 - <<'PY'
import os
runs = {arm: [l for l in open(f"{os.environ['OUT']}/load_{arm}.log") if l.startswith("TOKENS")] for arm in "10"}
print("tokens equal:", bool(runs["1"]) and runs["1"] == runs["0"])
PY
