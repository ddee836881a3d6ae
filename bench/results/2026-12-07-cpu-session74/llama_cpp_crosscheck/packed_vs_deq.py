"""Strata on a llama.cpp-quantized GGUF (its blocks kept packed, exact float32 products) against llama.cpp on the
same file dequantized by gguf-py to F32: prompt logits and 32 greedy tokens."""
import json, subprocess, sys
import numpy as np, torch
sys.path.insert(0, "/work/main/tests")
from strata import LLM, SamplingParams
from strata.weights.gguf_source import GGUFSource
from strata.weights.loader import build_model
from tiny_models import prompt_logits
packed, dequantized, length = sys.argv[1], sys.argv[2], 40
prompt = torch.randint(100, 40000, (length,), generator=torch.Generator().manual_seed(1)).tolist()
out = subprocess.run(["/tmp/lcpvenv/bin/python", "/tmp/xc/llama_logits.py", dequantized, json.dumps(prompt),
                      "/tmp/xc/l.npy"], capture_output=True, text=True)
llama_tokens = json.loads(out.stdout.strip().splitlines()[-1])
ll = torch.from_numpy(np.load("/tmp/xc/l.npy")).float()
sl = prompt_logits(build_model(GGUFSource(packed), "cpu", "float32", quiet=True), prompt)
llm = LLM(packed, device="cpu", dtype="float32", max_model_len=512, enable_prefix_caching=False, cpu_matmul="exact")
tokens = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0.0, max_tokens=32,
                                                                     ignore_eos=True))[0].outputs[0].token_ids
err = ((sl - ll).abs().max() / ll.abs().max()).item()
cos = torch.nn.functional.cosine_similarity(sl, ll, dim=1).min().item()
print(f"{packed} (packed) vs llama.cpp on its F32 dequantization: logits rel err {err:.2e}, min cosine {cos:.6f}, "
      f"greedy tokens equal {sum(a == b for a, b in zip(tokens, llama_tokens))}/32")
