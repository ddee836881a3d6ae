"""The byte and parameter model of strata/bench/roofline.py against hand-computed numbers for a tiny
config, and against the parameters strata's models really hold for every family."""

from __future__ import annotations

import pytest
import torch

from strata.bench.roofline import (ByteModel, count_params, decode_bandwidth, measure_copy_bandwidth,
                                   measure_matmul_flops)
from strata.config import ModelConfig
from strata.model.registry import model_class
from tiny_models import _CONFIGS, FAMILIES, hf_config

# Qwen3-MoE: 2 layers (layer 0 MoE, layer 1 a dense MLP), vocab 10, hidden 4, 2 heads of dim 2, 1 KV head,
# 4 experts top-2 of intermediate 2, dense intermediate 8, untied embeddings, q/k norms.
TINY = ModelConfig(architecture="Qwen3MoeForCausalLM", vocab_size=10, hidden_size=4, intermediate_size=8,
                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=2, qk_norm=True,
                   num_experts=4, num_experts_per_tok=2, moe_intermediate_size=2, mlp_only_layers=(1,))


def test_param_counts_by_hand():
    # attention: qkv 4 x (4 + 2 + 2) = 32, o_proj 4 x 4 = 16, q/k norms 2 + 2 -> 52; layer norms 8
    # layer 0: 52 + router 4 x 4 + 8 = 76; layer 1: 52 + 3 x 4 x 8 + 8 = 156
    # dense = 76 + 156 + final norm 4 + LM head 40 = 276; one expert 3 x 4 x 2 = 24
    counts = count_params(TINY)
    assert (counts.dense, counts.embedding, counts.per_expert, counts.num_moe_layers) == (276, 40, 24, 1)
    assert counts.total == 276 + 40 + 4 * 24
    assert counts.active == 276 + 2 * 24


def test_bytes_per_step_by_hand():
    model = ByteModel.from_config(TINY, dtype_bytes=2)
    assert (model.dense_bytes, model.expert_bytes) == (552, 48)
    assert model.kv_bytes_per_token == 2 * 1 * 2 * 2 * 2    # K and V, 1 head of dim 2, bf16, 2 attention layers
    assert model.state_bytes_per_slot == 0
    parts = model.bytes_per_step(experts_touched_per_layer=3, context_tokens=10, num_slots=2)
    assert parts == {"dense": 552, "experts": 3 * 48, "kv": 10 * 16, "recurrent_state": 0, "total": 856}


def test_speculation_bound_by_hand():
    """Tokens per byte of a verification step over a decode step's: the window's committed tokens when the
    bytes are alike; less when the window's rows read more experts (a random router's expectation, or
    the experts measured)."""
    model = ByteModel.from_config(TINY, dtype_bytes=2)                       # dense 552 bytes, an expert 48
    # 4 experts top-2: one row touches 2, three rows 4 * (1 - (1/2)^3) = 3.5
    assert model.expected_experts_touched(1) == pytest.approx(2.0)
    assert model.expected_experts_touched(3) == pytest.approx(3.5)
    bound = model.speculation_bound(slots=1, window_tokens=3, committed_per_window=2.5)
    assert bound == pytest.approx(2.5 * (552 + 2 * 48) / (552 + 3.5 * 48))
    measured = model.speculation_bound(1, 3, 2.5, experts=(2.0, 4.0))
    assert measured == pytest.approx(2.5 * (552 + 2 * 48) / (552 + 4 * 48))
    dense = ByteModel.from_config(ModelConfig(architecture="LlamaForCausalLM", vocab_size=10, hidden_size=4,
                                              intermediate_size=8, num_hidden_layers=1, num_attention_heads=2,
                                              num_key_value_heads=1, head_dim=2), dtype_bytes=2)
    assert dense.speculation_bound(4, 4, 3.0) == pytest.approx(3.0)


def test_recurrent_state_bytes_by_hand():
    cfg = ModelConfig.from_hf({**hf_config("qwen3_next").to_dict(), "architectures": ["Qwen3NextForCausalLM"]})
    model = ByteModel.from_config(cfg, dtype_bytes=2)
    # 2 linear layers: conv state (2 x 2 x 16 + 4 x 16 = 128 channels) x 3 positions x 2 bytes, delta-rule
    # state 4 heads x 16 x 16 x 4 bytes (float32)
    assert model.state_bytes_per_slot == 2 * (128 * 3 * 2 + 4 * 16 * 16 * 4)
    assert model.kv_bytes_per_token == 2 * 2 * 16 * 2 * 2
    assert model.bytes_per_step(0, 0, 3)["recurrent_state"] == 2 * 3 * model.state_bytes_per_slot


def test_decode_bandwidth_measured_and_estimated():
    model = ByteModel.from_config(TINY, dtype_bytes=2)
    decode = {"num_steps": 4, "wall_seconds": 0.004, "tokens_per_step": 1.0, "slots_per_step": 1.0,
              "context_tokens_per_step": 10.0}
    estimated = decode_bandwidth(model, decode, None, copy_bandwidth=1.616e6)
    assert estimated["experts_touched_source"] == "upper_bound_estimate"
    assert estimated["experts_touched_per_layer"] == 2.0            # one token, top-2
    assert estimated["bytes_per_decode_step"]["total"] == 552 + 2 * 48 + 160
    assert estimated["mean_decode_step_ms"] == pytest.approx(1.0)
    assert estimated["achieved_bandwidth_bytes_s"] == pytest.approx(808e3)
    assert estimated["bandwidth_fraction"] == pytest.approx(0.5)
    measured = decode_bandwidth(model, {**decode, "tokens_per_step": 8.0}, 3.0, copy_bandwidth=1.616e6)
    assert measured["experts_touched_source"] == "measured"
    assert measured["bytes_per_decode_step"]["experts"] == 3 * 48
    assert model.experts_touched_upper_bound(8.0) == 4.0             # capped at E
    assert decode_bandwidth(model, {**decode, "num_steps": 0}, None, 1.0) == {}


@pytest.mark.parametrize("family", FAMILIES + ("qwen3_next+mtp", "qwen4_exp+mtp"))
def test_param_counts_match_the_models(family):
    base, _, mtp = family.partition("+")
    hf = {**hf_config(base).to_dict(), "architectures": [_CONFIGS[base][1]], "num_nextn_predict_layers": int(bool(mtp))}
    cfg = ModelConfig.from_hf(hf)
    with torch.device("meta"):
        model = model_class(cfg)(cfg)
    params = dict(model.named_parameters())
    expert = sum(p.numel() for name, p in params.items() if name.endswith(("experts.w13", "experts.w2"))
                 and not name.startswith("mtp."))
    counts = count_params(cfg)
    assert counts.total == sum(p.numel() for p in params.values())
    assert counts.num_moe_layers * cfg.num_experts * counts.per_expert == expert
    assert counts.embedding == (0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size)


def test_device_measurements_run_on_the_cpu():
    assert measure_copy_bandwidth("cpu", 1 << 20, repeats=3) > 1e8
    assert measure_matmul_flops("cpu", size=64, dtype=torch.float32, repeats=3) > 1e6


def test_packed_model_bytes_are_the_blocks_it_reads(tmp_path):
    """A GGUF MoE loaded packed: experts and dense projections count their blocks (Q8_0: 34 bytes per 32
    weights); norms, the router and the embedding table as before; float32 elsewhere."""
    import transformers

    from gguf_writer import write_gguf
    from strata.weights.gguf_source import GGUFSource
    from strata.weights.loader import build_model

    config = hf_config("qwen3_moe")
    config.mlp_only_layers = []  # llama.cpp's qwen3moe has no dense layers
    hf = transformers.Qwen3MoeForCausalLM(config)
    path = str(tmp_path / "moe.gguf")
    write_gguf(path, {**hf.config.to_dict(), "architectures": ["Qwen3MoeForCausalLM"]}, dict(hf.state_dict()), "Q8_0")
    model = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    cfg = model.config
    dense, packed = ByteModel.from_config(cfg, 4), ByteModel.from_model(model, cfg, 4)
    assert packed.expert_bytes == 3 * cfg.hidden_size * cfg.moe_intermediate_size * 34 // 32
    assert dense.expert_bytes == 3 * cfg.hidden_size * cfg.moe_intermediate_size * 4
    small = 4 * (cfg.num_hidden_layers * 2 * cfg.hidden_size + cfg.hidden_size + 2 * cfg.num_hidden_layers * cfg.head_dim
                 + cfg.hidden_size * cfg.num_experts * cfg.num_hidden_layers)  # norms, q/k norms, routers: float32
    assert packed.dense_bytes == (dense.dense_bytes - small) * 34 // 128 + small


def test_qwen4_exp_byte_model_reads_every_module_but_the_tables():
    """Hyper-connections, indexers and PLE projections are read each step; the PLE table and the embedding
    only by the rows looked up, the MTP head not at all."""
    from strata.model.registry import model_class
    from strata.runner.memory import meta_model
    from strata.weights.source import open_source

    cfg = open_source("random:qwen4exp-125b?num_hidden_layers=4&ngram_vocab_size_base=1000").model_config()
    model = meta_model(model_class(cfg), cfg)
    skipped = {id(p) for name in ("model.embed_tokens", "model.layers.0.ple.ple_embedding", "mtp")
               for p in model.get_submodule(name).parameters()}
    skipped |= {id(p) for m in model.modules() if type(m).__name__ == "LocalExperts" for p in m.parameters()}
    expected = sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in skipped)
    assert ByteModel.from_model(model, cfg, 2).dense_bytes == expected
