"""Session 55: which eager GPU runs of the tiny Qwen3-Next + MTP model part from plain decoding on
test_cuda_graphs' staggered prompts (fresh prompts beside verification windows): per config, the requests whose
greedy tokens differ from plain decoding (batched, one sequence at a time) and where. Session 55 found the eager
bf16 MTP run parting where graphs did not: its steps of prompts beside windows took the torch Gated DeltaNet
path, plain prompts and graphs the Triton kernels; `mtp_torch_gdn` is that path again (STRATA_TORCH_MIXED_GDN=1)."""
import sys
sys.path.insert(0, "tests")
import os, tempfile, torch
from strata import LLM, SamplingParams
from tiny_models import save_tiny_model, add_random_mtp

d = tempfile.mkdtemp()
save_tiny_model("qwen3_next", d)
add_random_mtp(d)
gen = lambda n: torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist()
prompts = [(p[:4] * 30)[:n] for p, n in zip(map(gen, [5, 6, 7, 8, 9, 10, 11, 12]), [16, 40, 17, 100, 30, 24, 50, 20])]
lengths = [20, 6, 12, 9, 15, 4, 10, 8]
MTP = {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}
SUFFIX = {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}


def run(dtype, spec, seqs=3, graphs=False, device="cuda", **kw):
    llm = LLM(d, dtype=dtype, device=device, max_num_seqs=seqs, block_size=4, speculative_config=spec,
              cuda_graphs=graphs, **kw)
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in lengths]
    outs = [o.outputs[0].token_ids for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]
    del llm
    torch.cuda.empty_cache()
    return outs


def with_env(name, fn):
    os.environ[name] = "1"
    try:
        return fn()
    finally:
        os.environ.pop(name)


ARMS = {"plain3": lambda dt: run(dt, None), "mtp": lambda dt: run(dt, MTP),
        "mtp_torch_gdn": lambda dt: with_env("STRATA_TORCH_MIXED_GDN", lambda: run(dt, MTP)),
        "mtp_hold0": lambda dt: run(dt, MTP, admission_hold_steps=0), "suffix": lambda dt: run(dt, SUFFIX),
        "mtp_graphs": lambda dt: run(dt, MTP, graphs=True),
        "plain_cpu": lambda dt: run(dt, None, seqs=1, device="cpu")}  # the torch path on the host
# DIAG="dtype:arm,arm;dtype:arm" (default: every arm in float32, then in bf16), each printed as it ends
plan = os.environ.get("DIAG", ";".join(f"{dt}:{','.join(ARMS)}" for dt in ("float32", "bfloat16")))
for part in plan.split(";"):
    dtype, arms = part.split(":")
    ref = run(dtype, None, seqs=1)
    for name in arms.split(","):
        outs = ARMS[name](dtype)
        apart = [(i, next(p for p, (a, b) in enumerate(zip(x, y)) if a != b), x, y)
                 for i, (x, y) in enumerate(zip(ref, outs)) if x != y]
        print(dtype, name, "apart:", [(i, at) for i, at, _, _ in apart], flush=True)
        for i, at, x, y in apart[:3]:
            print("   ", i, at, "ref", x[:at + 3], "arm", y[:at + 3], flush=True)
