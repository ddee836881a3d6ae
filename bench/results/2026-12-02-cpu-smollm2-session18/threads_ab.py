import time, torch
from strata import LLM, SamplingParams
import strata.kernels.cpu_quant as cq
llm = LLM("smollm2-135m", device="cpu", max_model_len=1024, max_num_seqs=8)
prompts = [{"prompt_token_ids": list(range(100, 139))}]
p = SamplingParams(max_tokens=128, temperature=0, ignore_eos=True)
llm.generate(prompts, p)
res = {}
for rnd in range(3):
    for arm, macs in (("one_thread_below_2M", 2_000_000), ("threads_from_200k", 200_000), ("threads_always", 0)):
        cq.ONE_THREAD_MACS = macs
        t = time.perf_counter(); out = llm.generate(prompts, p); dt = time.perf_counter() - t
        res.setdefault(arm, []).append(round(128 / dt, 2))
        print(arm, res[arm][-1], flush=True)
print(res)
