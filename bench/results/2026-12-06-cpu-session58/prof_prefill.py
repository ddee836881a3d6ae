import cProfile, pstats, sys, time
from strata import LLM, SamplingParams
llm = LLM(device="cpu", max_model_len=1024)
def prompts(seed): return [{"prompt_token_ids": [(i * seed + j * 11) % 40000 + 100 for j in range(64)]} for i in range(8)]
llm.generate(prompts(3)[:2], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
for seed in (41, 43):
    t = time.perf_counter()
    llm.generate(prompts(seed), SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
    print("prefill", time.perf_counter() - t, file=sys.stderr)
pr = cProfile.Profile(); pr.enable()
llm.generate(prompts(47), SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
pr.disable()
st = pstats.Stats(pr); st.sort_stats("tottime").print_stats(18)
