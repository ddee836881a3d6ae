"""Tiny random models of every supported family, built with HF transformers (the reference) at an
initialisation scale where logits are peaked, and saved as real HF model folders; plus a helper that
runs a strata model over whole prompts through a real paged KV pool."""

from __future__ import annotations

import torch
import transformers

FAMILIES = ("llama", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen4_exp")

_COMMON = dict(vocab_size=160, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6,
               bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)

_CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(intermediate_size=128, rope_theta=10000.0,
                                                      initializer_range=0.2)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(intermediate_size=128, head_dim=16, rope_theta=10000.0,
                                                      initializer_range=0.2)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        intermediate_size=128, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, head_dim=16,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], rope_theta=10000.0,
        initializer_range=0.2)),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=8,
        num_experts_per_tok=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        rope_theta=10000.0, partial_rotary_factor=0.5, initializer_range=0.2)),
    # Qwen3.5: split Gated DeltaNet projections, every layer MoE (or every layer dense), text M-RoPE
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(
        moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                             mrope_section=[2, 1, 1], mrope_interleaved=True), initializer_range=0.2)),
    # Qwen4-Exp: 2 hyper-connection streams, QSA past 8 tokens (2 blocks of 4), PLE on the second layer
    "qwen4_exp": ("Qwen4ExpTextConfig", "Qwen4ExpForCausalLM", dict(
        moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, output_gate_type="sigmoid",
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                             mrope_section=[2, 1, 1], mrope_interleaved=True),
        hc_count=2, hc_lowrank=16, indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=8,
        indexer_compress_ratio=4, ple_layer_ids=[2], ple_embed_dim=32, ple_conv_kernel_size=4, ngram_size=3,
        heads_per_ngram=2, ngram_vocab_size_base=500, make_ngram_vocab_size_divisible_by=16, split_ngram_parts=3,
        initializer_range=0.2)),
    "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        intermediate_size=96, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                             mrope_section=[2, 1, 1], mrope_interleaved=True), initializer_range=0.2)),
}


def hf_config(family: str, **overrides):
    """overrides: config fields replacing the family's (e.g. rope_scaling, max_position_embeddings)."""
    config_cls, _, extra = _CONFIGS[family]
    return getattr(transformers, config_cls)(**{**_COMMON, **extra, **overrides})


def build_hf_model(family: str, seed: int = 0, **overrides):
    _, model_cls, _ = _CONFIGS[family]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(hf_config(family, **overrides)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            # HF initialises norms to 1 (or 0 when zero-centred) and biases to 0; give the norms some
            # spread so a wrong norm flavour or a missed weight changes the logits.
            if "norm" in name and param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.1)
    model.generation_config.eos_token_id = None  # tests compare fixed-length greedy runs
    return model


def hf_state(model) -> tuple[dict, dict]:
    """An HF model as (config dict with its architecture, state dict): what the GGUF test writer takes."""
    return {**model.config.to_dict(), "architectures": [type(model).__name__]}, dict(model.state_dict())


def moe_256_state() -> tuple[dict, dict]:
    """hf_state of a tiny Qwen3-MoE whose expert rows are whole superblocks (256 values), so every packed GGUF type
    keeps them packed (seeded)."""
    config = transformers.Qwen3MoeConfig(
        vocab_size=160, hidden_size=256, intermediate_size=512, moe_intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, rope_theta=10000.0)
    torch.manual_seed(0)
    return hf_state(transformers.Qwen3MoeForCausalLM(config).eval())


def save_tiny_model(family: str, folder: str, seed: int = 0, **overrides):
    model = build_hf_model(family, seed, **overrides)
    model.save_pretrained(folder)
    return model


def prompt_logits(model, token_ids: list[int], chunk: int | None = None, block_size: int = 4) -> torch.Tensor:
    """Run a strata model over one prompt (optionally in chunks) through a real KV/state pool;
    returns logits for every prompt position [T, V]."""
    from strata.cache.pools import KVPool, StatePool
    from strata.runner.inputs import build_inputs
    from strata.types import ScheduledSlot

    cfg = model.config
    num_blocks = -(-len(token_ids) // block_size)
    kv = KVPool(cfg.full_attention_layers, num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim,
                torch.float32, "cpu", model.index_key_layers())
    states = StatePool(model.recurrent_state_shapes(), 1, torch.float32, "cpu")
    tables = {0: list(range(num_blocks))}
    chunk = chunk or len(token_ids)
    logits = []
    with torch.inference_mode():
        for start in range(0, len(token_ids), chunk):
            ids = token_ids[start:start + chunk]
            work = ScheduledSlot(0, start, len(ids), [], ids)
            inputs = build_inputs([work], tables, block_size, kv.caches, states.caches, "cpu")
            logits.append(model.compute_logits(model(inputs.input_ids, inputs.ctx)))
    return torch.cat(logits)


def add_random_mtp(folder: str, seed: int = 5) -> None:
    """Give a saved tiny hybrid (qwen3_next, qwen3_5_moe, qwen4_exp) folder an MTP head (`mtp.*` tensors, the
    layouts real checkpoints use) with random weights, and say so in config.json."""
    import json
    import os

    from safetensors.torch import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    config_path = os.path.join(folder, "config.json")
    config = json.load(open(config_path))
    gen = torch.Generator().manual_seed(seed)

    def noisy(t: torch.Tensor) -> torch.Tensor:
        return t + 0.05 * torch.randn(t.shape, generator=gen)

    # a full-attention MoE layer of the tiny config: the MTP layer's shapes
    donor = "model.layers.1." if "hc_count" not in config else "model.layers.2."
    for name, t in list(tensors.items()):
        if name.startswith(donor):
            tensors["mtp.layers.0." + name[len(donor):]] = noisy(t)
    dim = tensors["model.embed_tokens.weight"].shape[1]
    if "hc_count" in config:  # Qwen4-Exp: split projection, a stream norm and its own output mixer
        tensors["mtp.fc_embedding.weight"] = torch.randn(dim, dim, generator=gen) * dim ** -0.5
        tensors["mtp.fc_hidden.weight"] = torch.randn(dim, dim, generator=gen) * dim ** -0.5
        tensors["mtp.pre_fc_norm_embedding.weight"] = 0.1 * torch.randn(dim, generator=gen)
        tensors["mtp.pre_fc_norm_hidden.weight"] = 0.1 * torch.randn(config["hc_count"] * dim, generator=gen)
        for name, t in list(tensors.items()):
            if name.startswith("model.hyper_connection_mixer."):
                tensors["mtp." + name.removeprefix("model.")] = noisy(t)
    else:
        tensors["mtp.fc.weight"] = torch.randn(dim, 2 * dim, generator=gen) * dim ** -0.5
        for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            tensors[f"mtp.{norm}.weight"] = 0.1 * torch.randn(dim, generator=gen)
    save_file(tensors, path, metadata={"format": "pt"})
    config["num_nextn_predict_layers"] = 1
    json.dump(config, open(config_path, "w"))
