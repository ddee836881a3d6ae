import sys, time, collections, functools, torch
from strata import LLM, SamplingParams
import strata.model.attention as A, strata.model.ops as O, strata.model.cpu_ops as C, strata.kernels.cpu_quant as Q
llm = LLM(device="cpu", max_model_len=1024)
def prompts(seed): return [{"prompt_token_ids": [(i * seed + j * 11) % 40000 + 100 for j in range(64)]} for i in range(8)]
llm.generate(prompts(3)[:2], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
acc = collections.defaultdict(float); cnt = collections.Counter(); on = [False]
def wrap(mod, name, label=None):
    f = getattr(mod, name); label = label or f"{mod.__name__.split('.')[-1]}.{name}"
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[label] += time.perf_counter() - t; cnt[label] += 1; return r
    setattr(mod, name, g)
wrap(A, "paged_attention"); wrap(A.Attention, "queries_after_kv_write", "Attention.queries_after_kv_write")
wrap(A.Attention, "output", "Attention.output"); wrap(C, "cpu_paged_attention"); wrap(C, "cpu_rope_kv")
wrap(Q, "dequant_matmul"); wrap(Q, "dequant_matmul_segments")
wrap(O, "rms_norm"); wrap(O, "packed_linear")
import strata.model.attention
for n in ("paged_attention",):
    pass
def run(seed, n):
    t = time.perf_counter(); llm.generate(prompts(seed), SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)); return time.perf_counter() - t
p = run(41, 1); acc.clear(); cnt.clear()
p2 = run(45, 1); a1 = dict(acc); c1 = dict(cnt); acc.clear(); cnt.clear()
g = run(43, 33)
print("prompt", p2, "gen33", g, "step ms", (g - p2) / 32 * 1000)
for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
    print(f"{k:40s} {(v - a1.get(k, 0))/32*1000:8.2f} ms/step  {(cnt[k] - c1.get(k, 0))//32} calls/step")
