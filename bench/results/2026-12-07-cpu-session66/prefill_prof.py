import cProfile, pstats, sys, time
from strata import LLM, SamplingParams
llm = LLM(device="cpu", max_model_len=1024)
def prompts(seed): return [{"prompt_token_ids": [(i * seed + j * 11) % 40000 + 100 for j in range(64)]} for i in range(8)]
llm.generate(prompts(3)[:2], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
for r in range(2):
    t = time.perf_counter()
    llm.generate(prompts(41 + r), SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
    print("prefill 8x64", time.perf_counter() - t)
pr = cProfile.Profile(); pr.enable()
llm.generate(prompts(45), SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
