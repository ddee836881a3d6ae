"""Weight sources other than GGUF: HF folders (errors a user can hit) and random weights of named shapes."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from strata.weights.loader import build_model
from strata.weights.source import open_source


def copy_folder(src: str, dst) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def test_missing_config_and_unknown_spec(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        open_source(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="smollm2-135m"):
        open_source("no-such-model")


def test_unsupported_architecture(tiny_model_dir, tmp_path):
    folder = copy_folder(tiny_model_dir("llama"), tmp_path / "m")
    config = json.load(open(os.path.join(folder, "config.json")))
    config["architectures"] = ["GPT2LMHeadModel"]
    json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    with pytest.raises(ValueError, match="unsupported architecture 'GPT2LMHeadModel'"):
        open_source(folder).model_config()


def test_corrupt_safetensors_names_the_file(tiny_model_dir, tmp_path):
    folder = copy_folder(tiny_model_dir("llama"), tmp_path / "m")
    path = os.path.join(folder, "model.safetensors")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(ValueError, match="model.safetensors"):
        build_model(open_source(folder), "cpu", "float32", quiet=True)


def test_shape_mismatch_names_tensor_and_expected_shape(tiny_model_dir, tmp_path):
    folder = copy_folder(tiny_model_dir("llama"), tmp_path / "m")
    config = json.load(open(os.path.join(folder, "config.json")))
    config["intermediate_size"] = 96
    json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    with pytest.raises(ValueError, match=r"tensor .model.layers.0.mlp.\w+_proj.weight. has shape \(\d+, \d+\), expected"):
        build_model(open_source(folder), "cpu", "float32", quiet=True)


def test_missing_tensor_is_reported(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = copy_folder(tiny_model_dir("llama"), tmp_path / "m")
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match="missing weights for model.layers.1.mlp.down_proj.weight"):
        build_model(open_source(folder), "cpu", "float32", quiet=True)


TINY_NEXT = ("random:qwen3-next-80b-a3b?num_hidden_layers=4&hidden_size=64&num_attention_heads=2"
             "&num_key_value_heads=1&head_dim=32&linear_num_key_heads=2&linear_num_value_heads=4"
             "&linear_key_head_dim=16&linear_value_head_dim=16&num_experts=16&moe_intermediate_size=32"
             "&shared_expert_intermediate_size=32&vocab_size=512&intermediate_size=64")


def test_random_weights_are_seeded_shaped_and_peaked():
    from tiny_models import prompt_logits

    source = open_source(TINY_NEXT)
    cfg = source.model_config()
    assert cfg.architecture == "Qwen3NextForCausalLM" and cfg.num_hidden_layers == 4
    assert cfg.layer_types == ("linear_attention",) * 3 + ("full_attention",) and cfg.num_experts_per_tok == 10
    a = build_model(source, "cpu", "float32", seed=1, quiet=True)
    b = build_model(open_source(TINY_NEXT), "cpu", "float32", seed=1, quiet=True)
    c = build_model(open_source(TINY_NEXT), "cpu", "float32", seed=2, quiet=True)
    assert a.has_mtp  # the named shape has an MTP layer and random weights fill it too
    for (name, pa), (_, pb), (_, pc) in zip(a.named_parameters(), b.named_parameters(), c.named_parameters()):
        assert torch.equal(pa, pb), name
    logits = prompt_logits(a, list(range(10, 40)))
    assert not torch.equal(logits, prompt_logits(c, list(range(10, 40))))
    top2 = logits.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).median() > 0.5  # peaked: greedy is far from ties


def test_huge_random_tensors_are_drawn_in_row_pieces(monkeypatch):
    """A tensor above random_source.HUGE_ELEMENTS (Qwen4-Exp's 95 GiB PLE table, kept in host memory) is drawn in row
    pieces of at most PIECE_ELEMENTS values, so no staging buffer is as large as it: here the tiny model's expert
    stacks w13 (16 x 64 x 64, its largest tensors) in pieces of 3 experts. Every expert is drawn (at the std of a whole
    draw), no piece repeats another, and the tensors drawn before them keep a whole draw's values."""
    from strata.weights import random_source

    whole = build_model(open_source(TINY_NEXT), "cpu", "float32", seed=1, quiet=True)
    monkeypatch.setattr(random_source, "HUGE_ELEMENTS", 16 * 64 * 64 - 1)
    monkeypatch.setattr(random_source, "PIECE_ELEMENTS", 3 * 64 * 64)
    filled = []
    normal = torch.Tensor.normal_
    monkeypatch.setattr(torch.Tensor, "normal_", lambda t, *a, **k: filled.append(tuple(t.shape)) or normal(t, *a, **k))
    pieces = build_model(open_source(TINY_NEXT), "cpu", "float32", seed=1, quiet=True)
    stacks = [name for name, p in pieces.named_parameters() if p.numel() > 16 * 64 * 64 - 1]
    assert len(stacks) == 5 and filled.count((3, 64, 64)) == 5 * 5 and filled.count((1, 64, 64)) == 5
    assert (16, 64, 64) not in filled
    w13 = pieces.model.layers[0].mlp.experts.w13                                     # [E, 2I, D]
    assert abs(w13.std().item() - 1 / 8) < 0.01 and w13.abs().amax(dim=(1, 2)).gt(0).all()
    assert not torch.equal(w13[:3], w13[3:6])
    assert torch.equal(pieces.model.embed_tokens.weight, whole.model.embed_tokens.weight)


def test_random_shape_errors():
    with pytest.raises(ValueError, match="unknown random shape"):
        open_source("random:gpt-5")
    with pytest.raises(ValueError, match="no field 'bogus'"):
        open_source("random:qwen3-30b-a3b?bogus=1")
