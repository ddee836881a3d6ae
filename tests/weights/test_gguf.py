"""GGUFSource on tiny random models of every family, written as llama.cpp would (tests/gguf_writer.py):
tensors round-trip to the HF state dict, configs agree with config.json, and models built from GGUF (F32,
F16, Q8_0, Q4_1) and from safetensors give the same logits. Qwen3.5 (and Qwen4-Exp) files keep llama.cpp's tiled
value-head order (the model reads it so): their tensors are compared with the HF ones tiled here, independently
of the writer, and their models with the safetensors model in HF order too; a Qwen3.5 MTP head loads from GGUF.
Qwen4-Exp's own parts (PLE table and hash constants, MTP head, bad metadata): test_qwen4_exp_gguf.py.
Corrupt, truncated and unsupported files give a ValueError naming the file. The real bundled GGUF is checked
against HF transformers in test_bundled_gguf.py.
"""

from __future__ import annotations

import json
import os
import re

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from gguf_writer import write_gguf
from strata.cache.pools import KVPool, StatePool
from strata.model.packed import PackedWeight
from strata.model.ple import head_vocab_sizes
from strata.model.rotary import inv_frequencies
from strata.runner.inputs import build_inputs
from strata.types import ScheduledSlot
from strata.weights.gguf_source import GGUFSource
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from tiny_models import FAMILIES, add_random_mtp, hf_config, prompt_logits, save_tiny_model

ZERO_CENTERED = ("input_layernorm", "post_attention_layernorm", "model.norm", "q_norm", "k_norm", "pre_fc_norm",
                 "mtp.norm", "hc_norm", "_layernorm", "ple.norm_")
HYBRID = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen4_exp")
# qwen4_exp is not in tiny_models.FAMILIES (strata.bench.count_params does not count its hyper-connections,
# PLE and indexers yet: tests/bench/test_roofline.py): its GGUF files are tested with the others here
GGUF_FAMILIES = FAMILIES
MTP_FAMILIES = ("qwen3_next", "qwen3_5_moe")
TILED = ("qwen3_5", "qwen3_5_moe", "qwen4_exp")  # llama.cpp tiles their value heads: 2 key heads, 4 value heads
# Qwen4-Exp's PLE hash constants: GGUF metadata, not tensors (the model derives them from its config)
HASH_BUFFERS = re.compile(r"\.ple_embedding\.(layer_multipliers|ngram_heads_offsets|ngram_heads_vocab_sizes)$")


def llama_cpp_value_order(name: str, tensor: torch.Tensor, cfg) -> torch.Tensor:
    """An HF Qwen3.5 tensor in llama.cpp's value-head order: value head position p = v * Hk + g holds HF's
    head g * (Hv / Hk) + v (HF groups them by key head g). cfg: the ModelConfig."""
    if ".linear_attn." not in name:
        return tensor
    num_k, num_v = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    heads = [g * (num_v // num_k) + v for v in range(num_v // num_k) for g in range(num_k)]

    def along(dim: int, kept: int, head_size: int) -> torch.Tensor:
        index = [*range(kept), *(kept + h * head_size + d for h in heads for d in range(head_size))]
        return tensor.index_select(dim, torch.tensor(index))

    key_channels = 2 * num_k * cfg.linear_key_head_dim  # q and k channels come first and keep their order
    if name.endswith((".in_proj_qkv.weight", ".conv1d.weight")):
        return along(0, key_channels, cfg.linear_value_head_dim)
    if name.endswith(".in_proj_z.weight"):
        return along(0, 0, cfg.linear_value_head_dim)
    if name.endswith((".in_proj_b.weight", ".in_proj_a.weight", ".A_log", ".dt_bias")):
        return along(0, 0, 1)
    if name.endswith(".out_proj.weight"):
        return along(1, 0, cfg.linear_value_head_dim)
    return tensor


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

@pytest.mark.parametrize("family, split_qkvz", [(family, True) for family in GGUF_FAMILIES] + [("qwen3_next", False)],
                         ids=[*GGUF_FAMILIES, "qwen3_next-ssm_in"])
def test_tensors_round_trip_to_hf_state_dict(family, split_qkvz, tmp_path):
    _, cfg, state = tiny_hf_model(family, mtp=family in MTP_FAMILIES)
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, split_qkvz=split_qkvz)
    source = GGUFSource(path)
    loaded = dict(source.tensors(torch.float32))
    assert source.num_tensors() == len(loaded)
    # lookup-only tables (Qwen4-Exp's n-gram table) stay the file's blocks whatever their type
    loaded = {name: t.dequantize(torch.float32) if isinstance(t, PackedWeight) else t for name, t in loaded.items()}
    state = {name: tensor for name, tensor in state.items() if not HASH_BUFFERS.search(name)}
    assert sorted(loaded) == sorted(state)
    model_config = source.model_config()
    assert model_config.linear_value_heads_tiled == (family in TILED)
    for name, expected in state.items():
        if family in TILED:
            expected = llama_cpp_value_order(name, expected, model_config)
        # the hybrids' norms (stored as 1 + w) and A_log (stored as -exp) come back to float32 rounding
        inexact = family in HYBRID and (name.endswith("A_log") or any(n in name for n in ZERO_CENTERED))
        if inexact:
            torch.testing.assert_close(loaded[name], expected, rtol=0, atol=1e-6)
        else:
            assert torch.equal(loaded[name], expected), name
    assert model_config.num_mtp_layers == (1 if family in MTP_FAMILIES else 0)


@pytest.mark.parametrize("family", GGUF_FAMILIES)
def test_gguf_config_matches_hf_config(family, tiny_folder, tmp_path):
    folder = tiny_folder(family)
    path = gguf_from_folder(folder, str(tmp_path / "model.gguf"), "F32")
    from_gguf = GGUFSource(path).model_config()
    assert from_gguf.linear_value_heads_tiled == (family in TILED)
    from_gguf = from_gguf.replace(linear_value_heads_tiled=False)  # checked by the logits tests
    assert comparable(from_gguf) == comparable(HFSource(folder).model_config())


def comparable(cfg):
    # transformers 5 writes layer_types (all full attention) for Qwen3; GGUF has them only for the hybrids. A GGUF
    # holds Qwen4-Exp's n-gram table whole, and its heads' sizes, not the base they were found from.
    return cfg.replace(layer_types=cfg.layer_types if cfg.linear_attention_layers else (), ngram_table_shards=1,
                       ngram_vocab_size_base=head_vocab_sizes(cfg.ngram_vocab_size_base, 0, 1)[0])


class QuantizedSource:
    """An HF source whose tensors went through a GGUF type and back, with the writer's rule (2-D and
    up, rows a multiple of the block). llama.cpp's layout changes but one only move whole rows, and blocks
    run along rows, so a GGUF model of that type must match it to float32 rounding. The one that moves
    columns, Qwen3.5's value-head order in out_proj, regroups blocks: with `tiled` the tensors are put in
    that order (llama_cpp_value_order) before they are quantized, and the model reads them so."""

    experts_packed = False

    def __init__(self, source: HFSource, quant: str, tiled: bool = False) -> None:
        self.source, self.qtype, self.tiled = source, gguf.GGMLQuantizationType[quant], tiled
        self.description = f"{source.description} ({quant})"

    def model_config(self):
        return self.source.model_config().replace(linear_value_heads_tiled=self.tiled)

    def num_tensors(self) -> int:
        return self.source.num_tensors()

    def tensors(self, dtype):
        block_size = gguf.GGML_QUANT_SIZES[self.qtype][0]
        cfg = self.source.model_config()
        for name, tensor in self.source.tensors(torch.float32):
            if self.tiled:
                tensor = llama_cpp_value_order(name, tensor, cfg)
            if tensor.dim() >= 2 and tensor.shape[-1] % block_size == 0:
                array = tensor.numpy()
                if self.qtype == gguf.GGMLQuantizationType.F16:
                    array = array.astype(np.float16).astype(np.float32)
                else:
                    array = gguf.quants.dequantize(gguf.quants.quantize(array, self.qtype), self.qtype)
                tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
            yield name, tensor.to(dtype)


@pytest.mark.parametrize("family", GGUF_FAMILIES)
@pytest.mark.parametrize("quant", ["F32", "F16", "BF16", "Q8_0", "Q4_1"])
def test_gguf_model_matches_safetensors_model(family, quant, tiny_folder, tmp_path):
    folder = tiny_folder(family)
    path = gguf_from_folder(folder, str(tmp_path / "model.gguf"), quant)
    from_gguf = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    from_safetensors = build_model(QuantizedSource(HFSource(folder), quant, tiled=family in TILED), "cpu", "float32",
                                   quiet=True)
    ids = torch.randint(3, 160, (24,), generator=torch.Generator().manual_seed(7)).tolist()
    # exact where the GGUF weights load dense; the packed kernels (Q8_0, Q4_1) sum in another order: up to
    # 1.6e-5 measured (qwen3_5, Q8_0). A layout error moves the logits by O(1).
    assert rel_err(prompt_logits(from_gguf, ids), prompt_logits(from_safetensors, ids)) < 5e-5


@pytest.mark.parametrize("family", TILED)
def test_tiled_gguf_model_matches_the_hf_order_model(family, tiny_folder, tmp_path):
    """The model reading llama.cpp's tiled value heads computes what the HF-order model computes (to float32
    summation order: out_proj sums its columns in another order)."""
    folder = tiny_folder(family)
    from_gguf = build_model(GGUFSource(gguf_from_folder(folder, str(tmp_path / "model.gguf"), "F32")), "cpu",
                            "float32", quiet=True)
    from_safetensors = build_model(HFSource(folder), "cpu", "float32", quiet=True)
    assert from_gguf.config.linear_value_heads_tiled and not from_safetensors.config.linear_value_heads_tiled
    ids = torch.randint(3, 160, (24,), generator=torch.Generator().manual_seed(7)).tolist()
    assert rel_err(prompt_logits(from_gguf, ids), prompt_logits(from_safetensors, ids)) < 1e-5


def mtp_draft_logits(model, token_ids: list[int]) -> torch.Tensor:
    """The target's hidden states over one prompt, then the MTP head's draft logits [T, V] for each position
    given the next token, through a real pool that holds the MTP layer's KV (and QSA's index keys) too."""
    cfg, block_size = model.config, 4
    num_blocks = -(-len(token_ids) // block_size)
    kv = KVPool([*cfg.full_attention_layers, cfg.num_hidden_layers], num_blocks, block_size,
                cfg.num_key_value_heads, cfg.head_dim, torch.float32, "cpu", model.index_key_layers())
    states = StatePool(model.recurrent_state_shapes(), 1, torch.float32, "cpu")
    work = ScheduledSlot(0, 0, len(token_ids), [], token_ids)
    inputs = build_inputs([work], {0: list(range(num_blocks))}, block_size, kv.caches, states.caches, "cpu")
    with torch.inference_mode():
        hidden = model(inputs.input_ids, inputs.ctx)                                        # [T, D]
        next_ids = torch.tensor(token_ids[1:] + token_ids[:1])
        return model.draft_logits(model.mtp_forward(next_ids, hidden, inputs.ctx))


def test_qwen3_5_moe_mtp_head_loads_from_gguf(tmp_path):
    """llama.cpp's Qwen3.5 MTP convention (block L: nextn.* and a full-attention MoE layer) comes back as the
    model's MTP head: the draft logits of the safetensors folder's head."""
    folder = str(tmp_path / "hf")
    save_tiny_model("qwen3_5_moe", folder)
    add_random_mtp(folder)
    path = gguf_from_folder(folder, str(tmp_path / "model.gguf"), "F32")
    fields = gguf.GGUFReader(path).fields
    assert fields["qwen35moe.nextn_predict_layers"].contents() == 1 and fields["qwen35moe.block_count"].contents() == 5
    assert fields["qwen35moe.rope.dimension_sections"].contents() == [2, 1, 1, 0]  # the config's mrope_section
    from_gguf = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    from_safetensors = build_model(HFSource(folder), "cpu", "float32", quiet=True)
    assert from_gguf.has_mtp and from_safetensors.has_mtp
    ids = torch.randint(3, 160, (12,), generator=torch.Generator().manual_seed(3)).tolist()
    expected = mtp_draft_logits(from_safetensors, ids)
    assert rel_err(mtp_draft_logits(from_gguf, ids), expected) < 1e-5


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
                                         r"qwen3moe, qwen3next, qwen35, qwen35moe"):
        GGUFSource(path)


def test_unknown_tensor_is_named(tmp_path):
    _, cfg, state = tiny_hf_model("qwen3")
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, extra_tensors={"blk.0.attn_sinks.weight": np.zeros(4, dtype=np.float32)})
    with pytest.raises(ValueError, match=r"tensor 'blk.0.attn_sinks.weight' has no HF equivalent in a qwen3 model"):
        GGUFSource(path)
