"""HF FP8 checkpoints (quant_method "fp8", float8_e4m3fn weights with `weight_scale_inv` block scales, the format
of Qwen's -FP8 releases): a tiny MoE and a tiny Gated DeltaNet hybrid quantized so (by a script of this test) load
with the logits of HF transformers' own FP8 dequantization (FineGrainedFP8Config(dequantize=True)), which differ
from the unquantized model's; a partial last block takes its block's scale; another quantization, a weight
without scales and scales of the wrong shape are clear errors naming what is wrong."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from strata.weights.fp8_blocks import dequantize_fp8
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from tiny_models import build_hf_model, prompt_logits

BLOCK = 32
PROMPT = [1, 17, 99, 23, 5, 140, 77, 3, 64, 12, 150]


def quantize_block(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, C] float -> (float8_e4m3fn [R, C], scale_inv [ceil(R / BLOCK), ceil(C / BLOCK)]): each block scaled so its
    largest magnitude is e4m3's 448."""
    rows, cols = values.shape
    scales = torch.zeros(-(-rows // BLOCK), -(-cols // BLOCK))
    quantized = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            block = values[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK].float()
            scales[i, j] = block.abs().max().clamp(min=1e-12) / 448.0
            quantized[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = (block / scales[i, j]).to(torch.float8_e4m3fn)
    return quantized, scales


def save_fp8(family: str, folder: str) -> transformers.PreTrainedModel:
    """The family's tiny model as an FP8 checkpoint: the linear weights whose sizes are whole blocks in FP8 (as
    the releases leave embeddings, the LM head, routers and odd sizes unquantized); -> the unquantized model."""
    model = build_hf_model(family)
    model.save_pretrained(folder)
    path = os.path.join(folder, "model.safetensors")
    tensors = {}
    for name, value in load_file(path).items():
        quantize = (name.endswith(".weight") and value.dim() == 2 and not any(
            part in name for part in ("norm", "embed", "lm_head", "mlp.gate.")) and
            value.shape[0] % BLOCK == 0 and value.shape[1] % BLOCK == 0)
        if quantize:
            tensors[name], tensors[name + "_scale_inv"] = quantize_block(value)
        else:
            tensors[name] = value
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [BLOCK, BLOCK]}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return model


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next"])
def test_fp8_checkpoint_loads_with_hf_dequantized_logits(family, tmp_path, caplog):
    folder = str(tmp_path / family)
    unquantized = save_fp8(family, folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        folder, quantization_config=transformers.FineGrainedFP8Config(dequantize=True), dtype=torch.float32).eval()
    with torch.no_grad():
        reference = hf(torch.tensor([PROMPT])).logits[0].float()
        original = unquantized.float()(torch.tensor([PROMPT])).logits[0]
    assert (reference - original).abs().max() > 0.05  # FP8 moved the logits: the comparison below means something
    with caplog.at_level(logging.WARNING):
        model = build_model(HFSource(folder), "cpu", "float32", quiet=True)
    assert "FP8" in caplog.text and "dequantized to float32" in caplog.text
    assert torch.allclose(prompt_logits(model, PROMPT), reference, atol=1e-4, rtol=1e-4)


def test_a_partial_last_block_takes_its_block_scale():
    values = torch.randn(40, 70, generator=torch.Generator().manual_seed(0))
    quantized, scales = quantize_block(values)
    assert scales.shape == (2, 3)
    dense = dequantize_fp8(quantized, scales, (BLOCK, BLOCK), "w")
    expected = torch.tensor([[quantized[i, j].float().item() * scales[i // BLOCK, j // BLOCK].item()
                              for j in range(70)] for i in range(40)])
    assert torch.equal(dense, expected)
    assert (dense - values).abs().max() < 0.07 * values.abs().max()  # e4m3 keeps 3 mantissa bits


def test_bad_fp8_checkpoints_are_clear_errors(tmp_path):
    folder = str(tmp_path / "m")
    save_fp8("qwen3_moe", folder)
    config_path, weights_path = os.path.join(folder, "config.json"), os.path.join(folder, "model.safetensors")
    with open(config_path) as f:
        config = json.load(f)
    tensors = load_file(weights_path)

    with open(config_path, "w") as f:
        json.dump({**config, "quantization_config": {"quant_method": "awq", "bits": 4}}, f)
    with pytest.raises(ValueError, match="'awq'"):
        HFSource(folder)
    with open(config_path, "w") as f:
        json.dump({**config, "quantization_config": {"quant_method": "fp8"}}, f)
    with pytest.raises(ValueError, match="weight_block_size"):
        HFSource(folder)

    with open(config_path, "w") as f:
        json.dump(config, f)
    name = "model.layers.0.self_attn.q_proj.weight"
    save_file({k: v for k, v in tensors.items() if k != name + "_scale_inv"}, weights_path)
    with pytest.raises(ValueError, match=f"{name} is float8_e4m3fn but the checkpoint has no {name}_scale_inv"):
        build_model(HFSource(folder), "cpu", "float32", quiet=True)
    save_file({**tensors, name + "_scale_inv": torch.ones(1, 1)}, weights_path)
    with pytest.raises(ValueError, match=r"q_proj.weight: an FP8 weight of shape \(64, 64\) needs a _scale_inv of "
                                         r"shape \(2, 2\)"):
        build_model(HFSource(folder), "cpu", "float32", quiet=True)


def test_scales_in_another_shard(tmp_path):
    """A sharded FP8 checkpoint whose scales lie in another file than their weights loads as the one-file one."""
    folder = str(tmp_path / "m")
    save_fp8("qwen3_moe", folder)
    one_file = prompt_logits(build_model(HFSource(folder), "cpu", "float32", quiet=True), PROMPT)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    os.remove(os.path.join(folder, "model.safetensors"))
    shards = {"a.safetensors": {k: v for k, v in tensors.items() if not k.endswith("_scale_inv")},
              "b.safetensors": {k: v for k, v in tensors.items() if k.endswith("_scale_inv")}}
    for name, part in shards.items():
        save_file(part, os.path.join(folder, name), metadata={"format": "pt"})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {k: name for name, part in shards.items() for k in part}}, f)
    assert torch.equal(prompt_logits(build_model(HFSource(folder), "cpu", "float32", quiet=True), PROMPT), one_file)
