"""GGUFSource on tiny random models of the four architectures, written as llama.cpp would
(tests/gguf_writer.py): tensors round-trip to the HF state dict, configs agree with config.json, and
models built from GGUF (F32, F16, Q8_0, Q4_1) and from safetensors give the same logits. Corrupt,
truncated and unsupported files give a ValueError naming the file. The real bundled GGUF is checked
against HF transformers in test_bundled_gguf.py.
"""

from __future__ import annotations

import json
import os

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from gguf_writer import write_gguf
from strata.model.rotary import inv_frequencies
from strata.weights.gguf_source import GGUFSource
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from tiny_models import FAMILIES, hf_config, prompt_logits

ZERO_CENTERED = ("input_layernorm", "post_attention_layernorm", "model.norm", "q_norm", "k_norm", "pre_fc_norm",
                 "mtp.norm")


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).abs().max() / expected.abs().max()).item()


def tiny_hf_model(family: str, mtp: bool = False):
    """A seeded tiny HF model llama.cpp can convert (its qwen3moe has no dense layers), with norms
    spread so that a wrong norm offset changes the logits."""
    from transformers import AutoModelForCausalLM

    config = hf_config(family)
    if family == "qwen3_moe":
        config.mlp_only_layers = []
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.1)
    cfg = {**model.config.to_dict(), "architectures": [type(model).__name__]}
    state = dict(model.state_dict())
    if mtp:  # an MTP head as Qwen3-Next checkpoints carry it: fc, three norms and one full-attention layer
        cfg["num_nextn_predict_layers"] = 1
        dim = cfg["hidden_size"]
        state["mtp.fc.weight"] = torch.randn(dim, 2 * dim)
        for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            state[f"mtp.{norm}.weight"] = torch.randn(dim) * 0.1
        last_full = max(i for i, kind in enumerate(cfg["layer_types"]) if kind == "full_attention")
        prefix = f"model.layers.{last_full}."
        state.update({"mtp.layers.0." + k[len(prefix):]: v.clone() for k, v in state.items() if k.startswith(prefix)})
    return model, cfg, state


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """family -> HF folder (config.json + safetensors) of `tiny_hf_model(family)`."""
    cache: dict[str, str] = {}

    def get(family: str) -> str:
        if family not in cache:
            folder = tmp_path_factory.mktemp(f"gguf-{family}")
            tiny_hf_model(family)[0].save_pretrained(folder)
            cache[family] = str(folder)
        return cache[family]

    return get


def gguf_from_folder(folder: str, path: str, quant: str) -> str:
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    write_gguf(path, cfg, load_file(os.path.join(folder, "model.safetensors")), quant)
    return path


# ---- tiny models written as llama.cpp would ----------------------------------------------------------

@pytest.mark.parametrize("family, split_qkvz", [(family, True) for family in FAMILIES] + [("qwen3_next", False)],
                         ids=[*FAMILIES, "qwen3_next-ssm_in"])
def test_tensors_round_trip_to_hf_state_dict(family, split_qkvz, tmp_path):
    _, cfg, state = tiny_hf_model(family, mtp=family == "qwen3_next")
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, split_qkvz=split_qkvz)
    source = GGUFSource(path)
    loaded = dict(source.tensors(torch.float32))
    assert source.num_tensors() == len(loaded)
    assert sorted(loaded) == sorted(state)
    for name, expected in state.items():
        # Qwen3-Next's norms (stored as 1 + w) and A_log (stored as -exp) come back to float32 rounding
        inexact = family == "qwen3_next" and (name.endswith("A_log") or any(n in name for n in ZERO_CENTERED))
        if inexact:
            torch.testing.assert_close(loaded[name], expected, rtol=0, atol=1e-6)
        else:
            assert torch.equal(loaded[name], expected), name
    assert source.model_config().num_mtp_layers == (1 if family == "qwen3_next" else 0)


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_config_matches_hf_config(family, tiny_folder, tmp_path):
    folder = tiny_folder(family)
    path = gguf_from_folder(folder, str(tmp_path / "model.gguf"), "F32")
    assert comparable(GGUFSource(path).model_config()) == comparable(HFSource(folder).model_config())


def comparable(cfg):
    # transformers 5 writes layer_types (all full attention) for Qwen3; GGUF has them only for Qwen3-Next
    return cfg.replace(layer_types=cfg.layer_types if cfg.linear_attention_layers else ())


class QuantizedSource:
    """An HF source whose tensors went through a GGUF type and back, with the writer's rule (2-D and
    up, rows a multiple of the block). llama.cpp's layout changes only move whole rows, and blocks
    run along rows, so a GGUF model of that type must match it to float32 rounding."""

    experts_packed = False

    def __init__(self, source: HFSource, quant: str) -> None:
        self.source, self.qtype = source, gguf.GGMLQuantizationType[quant]
        self.description = f"{source.description} ({quant})"

    def model_config(self):
        return self.source.model_config()

    def num_tensors(self) -> int:
        return self.source.num_tensors()

    def tensors(self, dtype):
        block_size = gguf.GGML_QUANT_SIZES[self.qtype][0]
        for name, tensor in self.source.tensors(torch.float32):
            if tensor.dim() >= 2 and tensor.shape[-1] % block_size == 0:
                array = tensor.numpy()
                if self.qtype == gguf.GGMLQuantizationType.F16:
                    array = array.astype(np.float16).astype(np.float32)
                else:
                    array = gguf.quants.dequantize(gguf.quants.quantize(array, self.qtype), self.qtype)
                tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
            yield name, tensor.to(dtype)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("quant", ["F32", "F16", "BF16", "Q8_0", "Q4_1"])
def test_gguf_model_matches_safetensors_model(family, quant, tiny_folder, tmp_path):
    folder = tiny_folder(family)
    path = gguf_from_folder(folder, str(tmp_path / "model.gguf"), quant)
    from_gguf = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    from_safetensors = build_model(QuantizedSource(HFSource(folder), quant), "cpu", "float32", quiet=True)
    ids = torch.randint(3, 160, (24,), generator=torch.Generator().manual_seed(7)).tolist()
    assert rel_err(prompt_logits(from_gguf, ids), prompt_logits(from_safetensors, ids)) < 1e-5


@pytest.mark.parametrize("head_dim, theta, scaling", [
    # Llama-3.1's own parameters
    (128, 500000.0, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}),
    # the tiny model's 8 frequencies need a wide band to put two of them inside it
    (16, 10000.0, {"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 16.0,
                   "original_max_position_embeddings": 512}),
])
def test_llama3_rope_freqs_become_rope_scaling(head_dim, theta, scaling, tmp_path):
    """llama.cpp stores Llama-3 rope scaling as a rope_freqs tensor; the recovered parameters give the
    same rotary frequencies as the original ones."""
    _, cfg, state = tiny_hf_model("llama")
    scaling = {"rope_type": "llama3", **scaling}
    cfg = {**cfg, "rope_parameters": {"rope_theta": theta, **scaling}}
    cfg["head_dim"] = head_dim  # only the metadata matters here: the weights stay those of head size 16
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state)
    source = GGUFSource(path)
    recovered = source.hf_config["rope_scaling"]
    assert recovered["rope_type"] == "llama3" and recovered["factor"] == scaling["factor"]
    torch.testing.assert_close(inv_frequencies(head_dim, theta, recovered),
                               inv_frequencies(head_dim, theta, scaling), rtol=1e-6, atol=0)
    assert "rope_freqs.weight" not in dict(source.tensors(torch.float32))


# ---- broken and unsupported files -------------------------------------------------------------------

def test_garbage_file_is_rejected_with_its_name(tmp_path):
    path = tmp_path / "garbage.gguf"
    path.write_bytes(b"this is not a model\n" * 100)
    with pytest.raises(ValueError, match=rf"{path}.*not a GGUF file"):
        GGUFSource(str(path))


@pytest.mark.parametrize("keep", [0, 10, 200, 0.6], ids=["empty", "in-magic-header", "in-metadata", "in-tensors"])
def test_truncated_file_is_rejected_with_its_name(keep, tmp_path):
    _, cfg, state = tiny_hf_model("qwen3")
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:keep if isinstance(keep, int) else int(len(data) * keep)])
    with pytest.raises(ValueError, match=rf"{path} is (truncated or corrupt|not a GGUF file)"):
        GGUFSource(path)


def test_unsupported_architecture_lists_the_supported_ones(tmp_path):
    path = str(tmp_path / "gpt2.gguf")
    writer = gguf.GGUFWriter(path, "gpt2")
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=rf"{path}: unsupported GGUF architecture 'gpt2'; supported: llama, qwen3, "
                                         r"qwen3moe, qwen3next"):
        GGUFSource(path)


def test_unknown_tensor_is_named(tmp_path):
    _, cfg, state = tiny_hf_model("qwen3")
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, extra_tensors={"blk.0.attn_sinks.weight": np.zeros(4, dtype=np.float32)})
    with pytest.raises(ValueError, match=r"tensor 'blk.0.attn_sinks.weight' has no HF equivalent in a qwen3 model"):
        GGUFSource(path)
