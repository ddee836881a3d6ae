import sys, time
from strata import LLM, SamplingParams
llm = LLM(device="cpu", max_model_len=1024)
model = llm.engine.runner.model if hasattr(llm.engine, "runner") else None
def find_model():
    import gc
    from strata.model.decoder import CausalLM
    return [o for o in gc.get_objects() if isinstance(o, CausalLM)][0]
def prompts(seed): return [{"prompt_token_ids": [(i * seed + j * 11) % 40000 + 100 for j in range(64)]} for i in range(8)]
llm.generate(prompts(3)[:2], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
m = find_model()
outs = {}
for r in range(2):
    for arm in ("stack", "modules"):
        m._stack = False
        if arm == "modules":
            m._stack = None
        seed = 41 + 2 * r
        llm.engine.scheduler.allocator.reset_prefix_cache()
        t = time.perf_counter(); llm.generate(prompts(seed + 100), SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)); p = time.perf_counter() - t
        llm.engine.scheduler.allocator.reset_prefix_cache()
        t = time.perf_counter(); res = llm.generate(prompts(seed), SamplingParams(temperature=0.0, max_tokens=65, ignore_eos=True)); g = time.perf_counter() - t
        outs.setdefault(seed, {})[arm] = [o.outputs[0].token_ids for o in res]
        print(arm, "round", r, "prompt", round(p, 3), "gen65", round(g, 3), "step ms", round((g - p) / 64 * 1000, 2), type(m._stack).__name__)
for seed, d in outs.items():
    print(seed, "same tokens:", d["stack"] == d["modules"])
