import cProfile, pstats, sys, time
from strata import LLM, SamplingParams
llm = LLM(device="cpu", max_model_len=1024)
def prompts(seed): return [{"prompt_token_ids": [(i * seed + j * 11) % 40000 + 100 for j in range(64)]} for i in range(8)]
llm.generate(prompts(3)[:2], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
res = {}
for name, toks, seed in (("prefill", 1, 41), ("all", 64, 43)):
    pr = cProfile.Profile(); pr.enable(); t = time.perf_counter()
    llm.generate(prompts(seed), SamplingParams(temperature=0.0, max_tokens=toks, ignore_eos=True))
    print(name, time.perf_counter() - t, file=sys.stderr); pr.disable()
    res[name] = {f"{k[0].split('/')[-1]}:{k[2]}": v[2] for k, v in pstats.Stats(pr).stats.items()}
    res[name + "_cum"] = {f"{k[0].split('/')[-1]}:{k[2]}": v[3] for k, v in pstats.Stats(pr).stats.items()}
diff = {k: (v - res["prefill"].get(k, 0)) / 63 * 1e3 for k, v in res["all"].items()}
for k, v in sorted(diff.items(), key=lambda x: -x[1])[:25]:
    print(f"{v:8.3f} ms/step tottime  {k}")
cum = {k: (v - res["prefill_cum"].get(k, 0)) / 63 * 1e3 for k, v in res["all_cum"].items()}
for k in ("decoder.py:forward", "attention.py:forward", "mlp.py:forward_ungated", "linear.py:forward"):
    print(f"{cum.get(k, 0):8.3f} ms/step cum {k}")
