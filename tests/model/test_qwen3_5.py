"""Qwen3.5-MoE as published: a multimodal checkpoint (Qwen3_5MoeForConditionalGeneration, nested
`text_config`, `model.language_model.*` weights beside a vision tower) serves its text model with HF's
logits. The text-only folders of both Qwen3.5 families are in the shared parity tests (tiny_models)."""

from __future__ import annotations

import json

import torch
import transformers

from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from tiny_models import hf_config, prompt_logits

TINY_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                   temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16)


def test_multimodal_checkpoint_serves_its_text_model(tmp_path):
    config = transformers.Qwen3_5MoeConfig(text_config=hf_config("qwen3_5_moe").to_dict(), vision_config=TINY_VISION)
    torch.manual_seed(0)
    hf = transformers.Qwen3_5MoeForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if "norm" in name and param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.1)
    hf.save_pretrained(tmp_path)
    assert "text_config" in json.loads((tmp_path / "config.json").read_text())

    model = build_model(HFSource(str(tmp_path)), "cpu", "float32", quiet=True)
    assert type(model).__name__ == "Qwen3_5MoeForCausalLM"
    assert not any("visual" in name for name, _ in model.named_parameters())
    ids = torch.randint(3, 160, (30,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    for chunk in (None, 7):
        ours = prompt_logits(model, ids, chunk=chunk)
        assert ((ours - ref).abs().max() / ref.abs().max()).item() < 1e-4
