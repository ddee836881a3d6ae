"""One arm of the CPU projection-path A/B (session 20, commit 604aaf4): run with PYTHONPATH at a tree of the
commit before it or of after it. Bundled SmolLM2-135M Q4_1, float32, torch at 2 threads. Prints one JSON line:
the overhead of one o_proj module call over its kernel alone (3 x 3,000 calls, best), and single-stream greedy
decode of a 39-token chat prompt, 128 tokens, best of 3 after a warm-up, with a digest of the tokens.
usage: PYTHONPATH=<tree> python projection_ab.py LABEL"""
import json
import sys
import time

import torch

torch.set_num_threads(2)
from strata import LLM, SamplingParams  # noqa: E402
from strata.kernels import cpu_quant  # noqa: E402
from strata.model.packed import PackedWeight  # noqa: E402


def per_call_us(fn, calls=3000):
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


llm = LLM(dtype="float32", device="cpu", max_num_seqs=1, max_model_len=8192)
modules = {n: m for n, m in llm.engine.runner.model.named_modules() if isinstance(getattr(m, "weight", None), PackedWeight)}
o_proj = modules["model.layers.0.self_attn.o_proj"]
x = torch.randn(1, 576)
qtype, blocks = o_proj.weight.segments()[0]
kernel_us = per_call_us(lambda: cpu_quant.dequant_matmul(x, blocks, qtype, 576, 576))
module_us = per_call_us(lambda: o_proj(x))
prompt = llm.encode_chat([{"role": "user", "content": "Write a short story about a lighthouse keeper."}])
params = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)
tokens = llm.generate({"prompt_token_ids": prompt}, params)[0].outputs[0].token_ids
best = 0.0
for _ in range(3):
    start = time.perf_counter()
    llm.generate({"prompt_token_ids": prompt}, params)
    best = max(best, 128 / (time.perf_counter() - start))
print(json.dumps({"arm": sys.argv[1], "o_proj_kernel_us": round(kernel_us, 1), "o_proj_module_us": round(module_us, 1),
                  "overhead_us": round(module_us - kernel_us, 1), "tok_per_s": round(best, 2),
                  "tokens_digest": hash(tuple(tokens))}))
