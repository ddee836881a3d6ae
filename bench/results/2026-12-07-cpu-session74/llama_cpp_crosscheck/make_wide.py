"""Tiny-depth models at widths whose rows take K-quant blocks (256), with the bundled tokenizer: Qwen3.5-MoE and
Qwen4-Exp (PLE width = hidden, layer types named full_attention in config.json as in the real checkpoint)."""
import json, sys
import torch, transformers
sys.path.insert(0, "/work/main/tests")
from tiny_models import hf_config
from tiny_tokenized import smollm2_tokenizer
tok = smollm2_tokenizer()
wide = dict(hidden_size=256, moe_intermediate_size=256, shared_expert_intermediate_size=256, head_dim=64,
            linear_key_head_dim=64, linear_value_head_dim=64, initializer_range=0.05)
for family, name, extra in (("qwen3_5_moe", "wide_q35", {}), ("qwen4_exp", "wide_q4e", dict(ple_embed_dim=256, indexer_head_dim=64))):
    cfg = hf_config(family, **wide, **extra)
    cfg.vocab_size = len(tok); cfg.bos_token_id, cfg.eos_token_id = tok.bos_token_id, tok.eos_token_id
    torch.manual_seed(0)
    model = getattr(transformers, {"qwen3_5_moe": "Qwen3_5MoeForCausalLM", "qwen4_exp": "Qwen4ExpForCausalLM"}[family])(cfg).eval()
    folder = f"/tmp/xc/{name}"
    model.save_pretrained(folder); tok.save_pretrained(folder)
    c = json.load(open(f"{folder}/config.json"))
    if "layer_types" in c:
        c["layer_types"] = ["full_attention" if t == "indexed_attention" else t for t in c["layer_types"]]
    json.dump(c, open(f"{folder}/config.json", "w"), indent=2)
    print(folder)
