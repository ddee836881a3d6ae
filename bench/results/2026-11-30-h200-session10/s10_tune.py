"""Device-only: single-stream decode variants in one process. Each variant recaptures the graphs, then
measures (a) back-to-back replays of the (1, 1) decode graph, (b) generate wall per token. Arms alternate."""
import json, os, statistics, sys, time
import torch
from strata import LLM, SamplingParams
import strata.model.attention as attn
import strata.kernels.skinny_linear as sk
import strata.kernels.fused_moe as fm
import strata.kernels.paged_attention as pa
import strata.experts.stats as st
import strata.kernels.rope_kv as rk
import strata.kernels.rms_norm as rn
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "old_kernels"))
import old_fused_moe, old_paged_attention, old_rope_kv, old_rms_norm
NEW = {"moe": (fm, {"_gate_up_kernel": fm._gate_up_kernel, "_down_kernel": fm._down_kernel}),
       "attn": (pa, {"_split_kernel": pa._split_kernel, "_merge_kernel": pa._merge_kernel}),
       "rope": (rk, {"_qk_norm_rope_kv_kernel": rk._qk_norm_rope_kv_kernel}),
       "norm": (rn, {"_rms_norm_kernel": rn._rms_norm_kernel})}
import functools
import strata.model.moe as moe_mod
import strata.sample.sampler as sampler_mod
from strata.kernels.argmax import argmax, argmax_ref
ORIG_ROUTE = moe_mod.route_and_align


class WarpOverride:
    """A Triton kernel whose launches take `warps` warps."""
    def __init__(self, kernel, warps):
        self.kernel, self.warps = kernel, warps

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *a, **kw: launch(*a, **{**kw, "num_warps": self.warps})


WARPS = {"norm": (rn, "_rms_norm_kernel"), "merge": (pa, "_merge_kernel"), "split": (pa, "_split_kernel"),
         "rope": (rk, "_qk_norm_rope_kv_kernel")}
OLD = {"moe": old_fused_moe, "attn": old_paged_attention, "rope": old_rope_kv, "norm": old_rms_norm}
from strata.kernels.routing import fold_step, fold_step_ref

model = "random:qwen3-30b-a3b?num_hidden_layers=24"
llm = LLM(model, dtype="bfloat16", device="cuda", max_num_seqs=4, max_model_len=4096, quiet=True)
V = llm.engine.model_config.vocab_size
prompt = [{"prompt_token_ids": torch.randint(100, V, (64,), generator=torch.Generator().manual_seed(0)).tolist()}]
params = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)
gc = llm.engine.runner.graphs
orig_skinny, orig_moe_cfg, orig_splits = sk.skinny_linear, fm.default_config, pa.num_splits_for

def setup(v):
    attn._fresh_kv_fused = (lambda: True) if v.get("fresh", True) else (lambda: False)
    cfgs = v.get("skinny")  # {weight rows: cfg}
    sk.skinny_linear = (lambda x, w, b=None, config=None: orig_skinny(x, w, b, cfgs.get(w.shape[0]))) if cfgs else orig_skinny
    moe = v.get("moe")
    fm.default_config = (lambda n, e: dict(moe) if n <= 16 else orig_moe_cfg(n, e)) if moe else orig_moe_cfg
    pps = v.get("pps")
    pa.num_splits_for = (lambda *a, **k: orig_splits(*a, **{**k, "programs_per_sm": pps})) if pps else orig_splits
    for part, (mod, kernels) in NEW.items():
        for name, kernel in kernels.items():
            setattr(mod, name, getattr(OLD[part], name) if part in v.get("old", ()) else kernel)
    for part, (mod, name) in WARPS.items():
        kernel = NEW[part][1][name] if part in NEW else getattr(mod, name)
        warps = v.get("warps", {}).get(part)
        setattr(mod, name, WarpOverride(kernel, warps) if warps else kernel)
    sampler_mod.argmax = argmax if v.get("argmax", True) else argmax_ref
    rw = v.get("route_warps")
    moe_mod.route_and_align = functools.partial(ORIG_ROUTE, num_warps=rw) if rw else ORIG_ROUTE
    st.fold_step = fold_step if v.get("fold", True) else fold_step_ref
    m = llm.engine.runner.model
    if v.get("lmbf16"):
        m.compute_logits = lambda h: m.lm_head(h).float()
    else:
        m.__dict__.pop("compute_logits", None)
    gc.release_all()

def measure():
    llm.engine.scheduler.allocator.reset_prefix_cache()
    torch.cuda.synchronize(); t = time.perf_counter()
    out = llm.generate(prompt, params)
    torch.cuda.synchronize(); wall = (time.perf_counter() - t) / 128 * 1e3
    cap = gc.graphs[(1, 1)]
    reps = []
    for _ in range(3):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(100):
            cap.graph.replay(1)
        torch.cuda.synchronize(); reps.append((time.perf_counter() - t) / 100 * 1e3)
    return wall, min(reps), out[0].outputs[0].token_ids

variants = json.loads(sys.argv[1])
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
res = {name: {"wall": [], "replay": []} for name in variants}
tokens = {}
for r in range(rounds):
    for name, v in variants.items():
        setup(v)
        measure()  # captures
        wall, rep, toks = measure()
        res[name]["wall"].append(wall); res[name]["replay"].append(rep)
        tokens.setdefault(name, toks)
        print(f"round {r} {name:24s} wall/token {wall:.4f} ms  replay {rep:.4f} ms", flush=True)
base = next(iter(tokens.values()))
for name, d in res.items():
    print(f"{name:24s} wall med {statistics.median(d['wall']):.4f}  replay med {statistics.median(d['replay']):.4f}  "
          f"min {min(d['replay']):.4f}  same tokens as first: {tokens[name] == base}")
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), f"tune_{os.environ.get('TAG', 'x')}.json"), "w"), indent=1)
