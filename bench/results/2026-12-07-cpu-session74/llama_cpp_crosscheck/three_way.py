"""One GGUF written by llama.cpp's converter from an HF folder: prompt logits and 32 greedy tokens of Strata (the
file), llama.cpp (the file, llama-cpp-python) and HF transformers (the folder), float32 CPU."""
import json, subprocess, sys
import numpy as np, torch, transformers
sys.path.insert(0, "/work/main/tests")
from strata.weights.gguf_source import GGUFSource
from strata.weights.loader import build_model
from strata import LLM, SamplingParams
from tiny_models import prompt_logits
folder, gguf, length = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40
prompt = torch.randint(100, 40000, (length,), generator=torch.Generator().manual_seed(1)).tolist()
out = subprocess.run(["/tmp/lcpvenv/bin/python", "/tmp/xc/llama_logits.py", gguf, json.dumps(prompt), "/tmp/xc/l.npy"],
                     capture_output=True, text=True)
if out.returncode:
    print(out.stderr[-2000:]); sys.exit(1)
llama_tokens = json.loads(out.stdout.strip().splitlines()[-1])
llama_logits = torch.from_numpy(np.load("/tmp/xc/l.npy")).float()
hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
with torch.no_grad():
    hf_logits = hf(torch.tensor([prompt])).logits[0]
    hf_tokens = hf.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False)[0, length:].tolist()
model = build_model(GGUFSource(gguf), "cpu", "float32", quiet=True)
strata_logits = prompt_logits(model, prompt)
llm = LLM(gguf, device="cpu", dtype="float32", max_model_len=512, enable_prefix_caching=False)
strata_tokens = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0.0, max_tokens=32,
                                                                            ignore_eos=True))[0].outputs[0].token_ids
err = lambda a, b: ((a - b).abs().max() / b.abs().max()).item()
same = lambda a, b: sum(x == y for x, y in zip(a, b))
print(f"{gguf} ({length}-token prompt): logits rel err strata/llama.cpp {err(strata_logits, llama_logits):.2e}, "
      f"strata/hf {err(strata_logits, hf_logits):.2e}, llama.cpp/hf {err(llama_logits, hf_logits):.2e}; greedy "
      f"tokens equal of 32: strata=llama.cpp {same(strata_tokens, llama_tokens)}, strata=hf "
      f"{same(strata_tokens, hf_tokens)}, llama.cpp=hf {same(llama_tokens, hf_tokens)}")
