import json, subprocess, sys
import numpy as np, torch
sys.path.insert(0, "/work/main/tests")
from strata.weights.gguf_source import GGUFSource
from strata.weights.loader import build_model
from tiny_models import prompt_logits
path = sys.argv[1]
prompt = [(7 * i) % 4000 + 3 for i in range(64)]
out = subprocess.run(["/tmp/lcpvenv/bin/python", "/tmp/xc/llama_logits.py", path, json.dumps(prompt), "/tmp/xc/l.npy"],
                     capture_output=True, text=True)
ll = torch.from_numpy(np.load("/tmp/xc/l.npy")).float()
sl = prompt_logits(build_model(GGUFSource(path), "cpu", "float32", quiet=True), prompt)
cos = torch.nn.functional.cosine_similarity(sl, ll, dim=1)
top2 = sl[-1].topk(2).values
print(f"cosine per position min {cos.min():.5f} mean {cos.mean():.5f}; last position argmax strata {sl[-1].argmax().item()} "
      f"llama.cpp {ll[-1].argmax().item()}; strata's top-2 margin {(top2[0] - top2[1]).item():.4f}, rel err "
      f"{((sl - ll).abs().max() / ll.abs().max()).item():.3e}")
