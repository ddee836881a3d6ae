import sys
from strata.engine.llm import LLM
from strata.types import SamplingParams
path, mode = sys.argv[1], sys.argv[2]
prompts = [{"prompt_token_ids": ([100 + i, 7, 8, 9, 10, 11] * 6)} for i in range(3)]
p = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
outs = {}
for spec in (None, {"method": "suffix", "num_speculative_tokens": 3}):
    kw = {} if spec is None else {"speculative_config": spec}
    with LLM(path, device="cpu", dtype="float32", max_model_len=512, max_num_seqs=4, cpu_matmul=mode, **kw) as llm:
        outs[spec is None] = [o.outputs[0].token_ids for o in llm.generate(prompts, p)]
        if spec: print("spec stats", llm.engine.status().get("speculation", {}) if hasattr(llm.engine, "status") else "")
print(mode, "same" if outs[True] == outs[False] else "DIFFERENT")
for a, b in zip(outs[True], outs[False]):
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None); print(i, a[28:40], b[28:40])
