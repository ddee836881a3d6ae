"""YaRN rope scaling against HF transformers (the reference): frequencies and attention factor equal
`_compute_yarn_parameters` for each parameter rule; tiny Qwen3 / Qwen3-MoE / Qwen3-Next models with YaRN give
HF's logits and greedy tokens at positions past original_max_position_embeddings (32 here, prompts of ~100
tokens), Qwen3.5-MoE and Qwen4-Exp its logits; a GGUF file written the way llama.cpp does keeps the parameters
and the logits."""

from __future__ import annotations

import json
import math
import os

import gguf
import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers.modeling_rope_utils import _compute_yarn_parameters

from gguf_writer import write_gguf
from strata import LLM, SamplingParams
from strata.config import ModelConfig, rope_attention_factor
from strata.model.rotary import RotaryEmbedding, inv_frequencies
from strata.weights import gguf_writer
from strata.weights.gguf_source import GGUFSource
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from tiny_models import build_hf_model, prompt_logits, save_tiny_model

ORIGINAL = 32
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}
MAX_POSITIONS = 128  # = original * factor, as HF expects of a YaRN config
NEW_TOKENS = 16


def _hf_yarn(rope: dict, head_dim: int = 16, theta: float = 10000.0, partial: float = 1.0,
             max_positions: int = MAX_POSITIONS) -> tuple[dict, tuple[torch.Tensor, float]]:
    """A raw config.json dict with these rope parameters, and HF's (inv_freq, attention_factor) for it."""
    raw = dict(architectures=["Qwen3ForCausalLM"], vocab_size=160, hidden_size=64, num_hidden_layers=2,
               num_attention_heads=4, head_dim=head_dim, max_position_embeddings=max_positions,
               rope_theta=theta, partial_rotary_factor=partial, rope_scaling=rope)
    hf = transformers.Qwen3Config(**{k: v for k, v in raw.items() if k != "architectures"})
    return raw, _compute_yarn_parameters(hf)


@pytest.mark.parametrize("rope, head_dim, theta, partial", [
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}, 16, 10000.0, 1.0),  # old key
    ({**YARN, "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 0.8}, 16, 10000.0, 1.0),
    ({**YARN, "attention_factor": 0.9, "beta_fast": 16, "beta_slow": 2}, 16, 10000.0, 1.0),
    # Qwen3-Next's shape: theta 1e7, a quarter of a 256 head rotated; no truncation of the ramp
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 262144, "truncate": False},
     256, 1e7, 0.25),
    ({"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096}, 128, 1e6, 1.0),
    ({**YARN, "factor": None}, 16, 10000.0, 1.0),  # DeepSeek-style: max_position_embeddings / original
])
def test_yarn_parameters_equal_hf(rope, head_dim, theta, partial):
    raw, (hf_inv_freq, hf_attention_factor) = _hf_yarn(rope, head_dim, theta, partial)
    cfg = ModelConfig.from_hf(raw)
    rot_dim = int(head_dim * partial)
    assert cfg.rope_scaling["rope_type"] == "yarn" and cfg.partial_rotary_factor == partial
    assert torch.equal(inv_frequencies(rot_dim, theta, cfg.rope_scaling), hf_inv_freq)
    assert rope_attention_factor(cfg.rope_scaling) == hf_attention_factor
    # the tables carry the factor, and only the factor: their shapes are those of plain rope
    rotary = RotaryEmbedding(head_dim, rot_dim, 64, theta, cfg.rope_scaling)
    plain_angles = torch.outer(torch.arange(64.0), hf_inv_freq)
    assert rotary.cos.shape == rotary.sin.shape == (64, rot_dim // 2)
    torch.testing.assert_close(rotary.cos, plain_angles.cos() * hf_attention_factor, rtol=0, atol=0)
    torch.testing.assert_close(rotary.sin, plain_angles.sin() * hf_attention_factor, rtol=0, atol=0)


def test_yarn_config_parsing():
    qwen3 = dict(architectures=["Qwen3ForCausalLM"], vocab_size=160, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, head_dim=16, max_position_embeddings=40960, rope_theta=1e6)
    # Qwen3's model card: rope_scaling added, max_position_embeddings left at 40960 -> 4 x 32768 positions
    cfg = ModelConfig.from_hf({**qwen3, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                         "original_max_position_embeddings": 32768}})
    assert cfg.max_position_embeddings == 131072 and cfg.rope_theta == 1e6
    # transformers 5's rope_parameters (theta inside); no original length: HF takes max_position_embeddings
    no_theta = {k: v for k, v in qwen3.items() if k != "rope_theta"}
    cfg = ModelConfig.from_hf({**no_theta, "max_position_embeddings": 262144,
                               "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e7}})
    assert cfg.rope_theta == 1e7 and cfg.rope_scaling["original_max_position_embeddings"] == 262144
    assert cfg.max_position_embeddings == 1048576
    # a top-level original_max_position_embeddings wins, as in HF
    cfg = ModelConfig.from_hf({**qwen3, "original_max_position_embeddings": 8192,
                               "rope_scaling": {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1}})
    assert cfg.rope_scaling["original_max_position_embeddings"] == 8192 and "type" not in cfg.rope_scaling
    for rope in ({"rope_type": "dynamic", "factor": 2.0}, {"type": "longrope"}):
        with pytest.raises(ValueError, match=r"rope type '\w+' is not supported \(supported: default, linear, "
                                             r"llama3, yarn\)"):
            ModelConfig.from_hf({**qwen3, "rope_scaling": rope})


def _prompt(length: int, seed: int) -> list[int]:
    return torch.randint(3, 160, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours - ref).abs().max() / ref.abs().max()).item()


@pytest.fixture(scope="module")
def yarn_model_dir(tmp_path_factory):
    cache: dict[str, str] = {}

    def get(family: str) -> str:
        if family not in cache:
            folder = tmp_path_factory.mktemp(f"yarn-{family}")
            save_tiny_model(family, str(folder), rope_scaling=dict(YARN), max_position_embeddings=MAX_POSITIONS)
            cache[family] = str(folder)
        return cache[family]

    return get


def _hf_yarn_model(family: str):
    return build_hf_model(family, rope_scaling=dict(YARN), max_position_embeddings=MAX_POSITIONS)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe", "qwen3_next"])
def test_yarn_logits_and_greedy_match_hf(family, yarn_model_dir):
    hf = _hf_yarn_model(family)
    assert hf.config.rope_parameters["rope_type"] == "yarn"
    folder = yarn_model_dir(family)
    model = build_model(HFSource(folder), "cpu", "float32", quiet=True)
    assert model.config.rope_scaling["factor"] == 4.0
    ids = _prompt(100, seed=4)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert _rel_err(prompt_logits(model, ids), ref) < 1e-4
    assert _rel_err(prompt_logits(model, ids, chunk=37), ref) < 1e-4
    # without the scaling the logits past the original context are far off: the test can tell
    plain = build_hf_model(family, max_position_embeddings=MAX_POSITIONS)
    with torch.no_grad():
        assert _rel_err(plain(torch.tensor([ids])).logits[0][ORIGINAL:], ref[ORIGINAL:]) > 1e-2

    llm = LLM(folder, dtype="float32", device="cpu", max_num_seqs=2, block_size=8)
    prompts = [_prompt(n, seed=n) for n in (97, 40)]
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    for prompt, out in zip(prompts, outputs):
        ref = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=NEW_TOKENS,
                          output_logits=True, return_dict_in_generate=True)
        margins = [torch.topk(step[0], 2).values for step in ref.logits]
        assert min((m[0] - m[1]).item() for m in margins) > 1e-4
        assert out.outputs[0].token_ids == ref.sequences[0, len(prompt):].tolist()


@pytest.mark.parametrize("family", ["qwen3_5_moe", "qwen4_exp"])
def test_yarn_in_rope_parameters_matches_hf(family, tmp_path):
    """transformers 5's form (rope_parameters, beside Qwen3.5's M-RoPE keys); Qwen4-Exp's QSA indexer rotates
    its queries and block keys with the same scaled tables (its budget of 8 tokens is long past here)."""
    rope = {**YARN, "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1],
            "mrope_interleaved": True}
    hf = save_tiny_model(family, str(tmp_path), rope_parameters=rope, max_position_embeddings=MAX_POSITIONS)
    model = build_model(HFSource(str(tmp_path)), "cpu", "float32", quiet=True)
    ids = _prompt(100, seed=5)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert _rel_err(prompt_logits(model, ids), ref) < 1e-4
    rotaries = [m for m in model.modules() if isinstance(m, RotaryEmbedding)]
    assert len(rotaries) == len(model.config.full_attention_layers)
    assert len({m.cos.data_ptr() for m in rotaries}) == 1  # one table pair for all layers (Qwen3.5-MoE: 2)


@pytest.mark.parametrize("family, rope, in_gguf", [
    ("qwen3", {**YARN, "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.25}, None),
    ("qwen3_next", dict(YARN), None),
    # what llama.cpp's keys cannot say is written as what HF computes from it
    ("qwen3", {**YARN, "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 0.8},
     {**YARN, "factor": 8.0, "attention_factor": pytest.approx((0.1 * math.log(8) + 1) / (0.08 * math.log(8) + 1))}),
    ("qwen3", {**YARN, "factor": None}, YARN),
])
def test_yarn_gguf_round_trip(family, rope, in_gguf, tmp_path):
    folder = str(tmp_path / "hf")
    save_tiny_model(family, folder, rope_scaling=dict(rope), max_position_embeddings=MAX_POSITIONS)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, load_file(os.path.join(folder, "model.safetensors")))
    arch = {"qwen3": "qwen3", "qwen3_next": "qwen3next"}[family]
    fields = gguf.GGUFReader(path).fields
    assert fields[f"{arch}.rope.scaling.type"].contents() == "yarn"
    assert fields[f"{arch}.rope.scaling.original_context_length"].contents() == ORIGINAL
    source = GGUFSource(path)
    recovered = source.hf_config["rope_scaling"]
    assert recovered == (in_gguf or rope)  # every parameter, nothing more
    assert source.model_config().max_position_embeddings == max(MAX_POSITIONS, ORIGINAL * recovered["factor"])
    if in_gguf is None:
        hf_scaling = ModelConfig.from_hf(cfg).rope_scaling  # HF saves theta and the partial factor beside them
        assert source.model_config().rope_scaling == {k: v for k, v in hf_scaling.items()
                                                      if k not in ("rope_theta", "partial_rotary_factor")}
    hf = build_hf_model(family, rope_scaling=dict(rope), max_position_embeddings=MAX_POSITIONS)
    ids = _prompt(90, seed=6)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert _rel_err(prompt_logits(build_model(source, "cpu", "float32", quiet=True), ids), ref) < 1e-4


def test_yarn_truncate_false_is_not_written_to_gguf(tmp_path):
    hf = build_hf_model("qwen3", rope_scaling={**YARN, "truncate": False}, max_position_embeddings=MAX_POSITIONS)
    cfg = {**hf.config.to_dict(), "architectures": ["Qwen3ForCausalLM"]}
    with pytest.raises(ValueError, match="truncate=false"):
        write_gguf(str(tmp_path / "model.gguf"), cfg, dict(hf.state_dict()))


def _gguf_with_yarn_keys(tmp_path, monkeypatch, keys: dict[str, float]) -> str:
    """A tiny YaRN Qwen3 GGUF with more float32 `rope.scaling.*` keys, as llama.cpp writes for other archs."""
    write_llama_cpp_yarn = gguf_writer._write_yarn

    def write_yarn(w, rope, cfg):
        write_llama_cpp_yarn(w, rope, cfg)
        for key, value in keys.items():
            w.add_float32(f"{w.arch}.rope.scaling.{key}", value)

    monkeypatch.setattr(gguf_writer, "_write_yarn", write_yarn)
    hf = build_hf_model("qwen3", rope_scaling=dict(YARN), max_position_embeddings=MAX_POSITIONS)
    path = str(tmp_path / "model.gguf")
    write_gguf(path, {**hf.config.to_dict(), "architectures": ["Qwen3ForCausalLM"]}, dict(hf.state_dict()))
    return path


@pytest.mark.parametrize("keys, expected", [
    # llama.cpp's DeepSeek-style key: 0.1 * mscale_all_dim, read with mscale 1 as llama.cpp does for these archs
    ({"yarn_log_multiplier": 0.08}, {"mscale": 1.0, "mscale_all_dim": 0.8}),
    # a multiplier on the magnitude YaRN's factor gives
    ({"attn_factor": 0.5}, {"attention_factor": 0.5 * (0.1 * math.log(4.0) + 1)}),
    ({"yarn_ext_factor": 1.0}, {}),
])
def test_gguf_yarn_keys_llama_cpp_writes_for_other_archs(keys, expected, tmp_path, monkeypatch):
    recovered = GGUFSource(_gguf_with_yarn_keys(tmp_path, monkeypatch, keys)).hf_config["rope_scaling"]
    assert recovered.keys() == {**YARN, **expected}.keys()
    for key, value in expected.items():
        assert recovered[key] == pytest.approx(value, rel=1e-6)


def test_gguf_yarn_ext_factor_other_than_one_is_named(tmp_path, monkeypatch):
    path = _gguf_with_yarn_keys(tmp_path, monkeypatch, {"yarn_ext_factor": 0.5})
    with pytest.raises(ValueError, match=r"model\.gguf: qwen3\.rope\.scaling\.yarn_ext_factor = 0\.5 is not supported"):
        GGUFSource(path)
