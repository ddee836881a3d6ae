import sys, time
from strata import LLM, SamplingParams
llm = LLM(sys.argv[1], device="cpu", max_num_seqs=1, max_model_len=2048, enable_prefix_caching=False)
one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
for n in (64, 512):
    best = 1e9
    for s in range(3):
        p = {"prompt_token_ids": [(7 * i + s) % 4000 + 3 for i in range(n)]}
        t = time.perf_counter(); llm.generate([p], one); best = min(best, time.perf_counter() - t)
    print(f"strata: prompt {n} {best * 1e3:.1f} ms ({n / best:.0f} tok/s)")
