"""Strata's MTP draft logits from llama.cpp's converted file (its nextn tensors) against Strata on the HF folder's
mtp.* safetensors: FOLDER GGUF."""
import sys
import torch
sys.path[:0] = ["/work/main/tests", "/work/main/tests/weights"]
from strata.weights.gguf_source import GGUFSource
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from test_gguf import mtp_draft_logits
folder, path = sys.argv[1], sys.argv[2]
ids = torch.randint(100, 40000, (24,), generator=torch.Generator().manual_seed(3)).tolist()
a = mtp_draft_logits(build_model(GGUFSource(path), "cpu", "float32", quiet=True), ids)
b = mtp_draft_logits(build_model(HFSource(folder), "cpu", "float32", quiet=True), ids)
print(f"{path}: MTP draft logits rel err against the safetensors head {((a - b).abs().max() / b.abs().max()).item():.2e}, "
      f"argmax equal {(a.argmax(1) == b.argmax(1)).float().mean().item():.2f}")
