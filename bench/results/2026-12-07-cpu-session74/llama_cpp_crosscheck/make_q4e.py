"""Tiny Qwen4-Exp folders that llama.cpp's qwen4exp graph can hold (its PLE projections take n_embd inputs: the
PLE width equals the hidden size, as in the real model), with the bundled tokenizer; `full` also names the attention
layers full_attention in config.json (as the real checkpoint does, so llama.cpp's converter writes their ratios)."""
import json, sys
import torch, transformers
sys.path.insert(0, "/work/main/tests")
from tiny_models import hf_config
from tiny_tokenized import smollm2_tokenizer
tok = smollm2_tokenizer()
for name, full in (("q4e_dense", False), ("q4e_qsa", True)):
    cfg = hf_config("qwen4_exp", ple_embed_dim=64)
    cfg.vocab_size = len(tok); cfg.bos_token_id, cfg.eos_token_id = tok.bos_token_id, tok.eos_token_id
    torch.manual_seed(0)
    model = getattr(transformers, "Qwen4ExpForCausalLM")(cfg).eval()
    folder = f"/tmp/xc/{name}"
    model.save_pretrained(folder); tok.save_pretrained(folder)
    if full:
        c = json.load(open(f"{folder}/config.json"))
        c["layer_types"] = ["full_attention" if t == "indexed_attention" else t for t in c["layer_types"]]
        json.dump(c, open(f"{folder}/config.json", "w"), indent=2)
    print(folder)
