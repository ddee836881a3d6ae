"""The model's shape: ModelConfig, read from an HF config.json (or GGUF metadata converted to the same keys), and
the HF fields it folds in (rope scaling, Qwen4-Exp's extras). Nothing here imports torch or any other part of strata.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "Qwen4ExpForCausalLM",
)
# multimodal checkpoints whose text model we serve: their config nests it in `text_config`, their weights
# are `model.language_model.*` (the vision tower, `model.visual.*`, is not loaded)
TEXT_MODEL_OF = {
    "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeForCausalLM",
    "Qwen4ExpForConditionalGeneration": "Qwen4ExpForCausalLM",
}
ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # HF rope_type values model/rotary.py computes
# hybrid families: Gated DeltaNet layers beside (gated) attention, partial rotary by default
HYBRID_ARCHITECTURES = ("Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen4ExpForCausalLM")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of one checkpoint, read from an HF config.json (or GGUF metadata
    converted to the same keys)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None          # None or {"rope_type": "linear"|"llama3"|"yarn", ...}
    partial_rotary_factor: float = 1.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False                     # Qwen3: RMSNorm over head_dim on q and k
    hidden_act: str = "silu"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    # Mixture of experts (Qwen3-MoE, Qwen3-Next)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    shared_expert_intermediate_size: int = 0
    # Hybrid attention (Qwen3-Next): per-layer "full_attention" | "linear_attention"
    layer_types: tuple[str, ...] = ()
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 4
    # value head j reads key head j % Hk (llama.cpp's Qwen3.5 GGUFs reorder them so) instead of HF's j // (Hv / Hk)
    linear_value_heads_tiled: bool = False
    num_mtp_layers: int = 0                   # Qwen3-Next MTP draft head (`mtp.*` weights)
    linear_gate_activation: str = "silu"      # the delta-rule output gate (Qwen4-Exp: sigmoid)
    # Qwen4-Exp hyper-connections: hc_count residual streams, low-rank input mixers
    hc_count: int = 1
    hc_lowrank: int = 0
    # Qwen4-Exp QSA indexed attention on the full-attention layers (0 heads: plain attention; compress ratio 0: the
    # indexers are kept but unread and the layers attend densely, as llama.cpp reads a GGUF of ratio 0)
    indexer_n_heads: int = 0
    indexer_head_dim: int = 0
    indexer_budget: int = 0
    indexer_compress_ratio: int = 1
    # Qwen4-Exp PLE: hashed n-gram embeddings on these layers (0-based; HF's ple_layer_ids are 1-based)
    ple_layers: tuple[int, ...] = ()
    ple_embed_dim: int = 0
    ple_conv_kernel_size: int = 4
    ngram_size: int = 3
    heads_per_ngram: int = 8
    ngram_vocab_size_base: int = 20_000_000
    ngram_vocab_size_multiple: int = 128
    ngram_seed: int = 1234
    ngram_table_shards: int = 1               # the HF checkpoint stores each table in this many row shards

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        archs = hf.get("architectures") or []
        if not archs:
            raise ValueError("config.json has no 'architectures' entry")
        arch = TEXT_MODEL_OF.get(archs[0], archs[0])
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"unsupported architecture {arch!r}; supported: "
                             f"{', '.join(SUPPORTED_ARCHITECTURES + tuple(TEXT_MODEL_OF))}")
        if isinstance(hf.get("text_config"), dict):  # the text model's keys win over the wrapper's
            hf = {**{k: v for k, v in hf.items() if k not in ("text_config", "vision_config")}, **hf["text_config"]}
        num_heads = hf["num_attention_heads"]
        # HF's priority: an old-style rope_scaling replaces rope_parameters (their theta stays usable)
        rope = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
        rope_theta = hf.get("rope_theta", rope.get("rope_theta", (hf.get("rope_parameters") or {}).get(
            "rope_theta", 10000.0)))
        partial = hf.get("partial_rotary_factor", rope.get("partial_rotary_factor",
                                                           0.25 if arch in HYBRID_ARCHITECTURES else 1.0))
        rope_scaling = hf_rope_scaling(hf, rope)
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        num_layers = hf["num_hidden_layers"]
        layer_types = tuple(hf.get("layer_types") or ())
        if arch in HYBRID_ARCHITECTURES and not layer_types:
            interval = hf.get("full_attention_interval", 4)
            layer_types = tuple("linear_attention" if (i + 1) % interval else "full_attention"
                                for i in range(num_layers))
        return cls(
            architecture=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf.get("intermediate_size", 0),
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=hf.get("num_key_value_heads", num_heads),
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta),
            rope_scaling=rope_scaling,
            partial_rotary_factor=float(partial),
            max_position_embeddings=_max_positions(hf.get("max_position_embeddings", 4096), rope_scaling),
            tie_word_embeddings=hf.get("tie_word_embeddings", False),
            attention_bias=hf.get("attention_bias", False),
            qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", *HYBRID_ARCHITECTURES),
            hidden_act=hf.get("hidden_act", "silu"),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=eos_ids,
            num_experts=hf.get("num_experts") or hf.get("num_local_experts") or 0,
            num_experts_per_tok=hf.get("num_experts_per_tok", 0) or 0,
            moe_intermediate_size=hf.get("moe_intermediate_size", 0) or 0,
            norm_topk_prob=hf.get("norm_topk_prob", True),
            decoder_sparse_step=hf.get("decoder_sparse_step", 1) or 1,
            mlp_only_layers=tuple(hf.get("mlp_only_layers") or ()),
            shared_expert_intermediate_size=hf.get("shared_expert_intermediate_size", 0) or 0,
            layer_types=layer_types,
            linear_num_key_heads=hf.get("linear_num_key_heads", 0),
            linear_num_value_heads=hf.get("linear_num_value_heads", 0),
            linear_key_head_dim=hf.get("linear_key_head_dim", 0),
            linear_value_head_dim=hf.get("linear_value_head_dim", 0),
            linear_conv_kernel_dim=hf.get("linear_conv_kernel_dim", 4),
            linear_value_heads_tiled=bool(hf.get("linear_value_heads_tiled", False)),
            num_mtp_layers=hf.get("num_nextn_predict_layers", hf.get("mtp_num_hidden_layers", 0)) or 0,
            **(_qwen4_exp_fields(hf, layer_types) if arch == "Qwen4ExpForCausalLM" else {}),
        )

    @property
    def qsa(self) -> bool:
        """Whether the full-attention layers attend through QSA's indexers (else densely)."""
        return bool(self.indexer_n_heads and self.indexer_compress_ratio)

    @property
    def ngram_heads(self) -> int:
        return (self.ngram_size - 1) * self.heads_per_ngram

    def is_moe_layer(self, layer_idx: int) -> bool:
        return (self.num_experts > 0 and layer_idx not in self.mlp_only_layers
                and (layer_idx + 1) % self.decoder_sparse_step == 0)

    def is_linear_attention_layer(self, layer_idx: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer_idx] == "linear_attention"

    @property
    def full_attention_layers(self) -> list[int]:
        return [i for i in range(self.num_hidden_layers) if not self.is_linear_attention_layer(i)]

    @property
    def linear_attention_layers(self) -> list[int]:
        return [i for i in range(self.num_hidden_layers) if self.is_linear_attention_layer(i)]

    def replace(self, **overrides: Any) -> ModelConfig:
        return dataclasses.replace(self, **overrides)


def hf_rope_scaling(hf: dict[str, Any], rope: dict[str, Any]) -> dict[str, Any] | None:
    """HF rope parameters -> ModelConfig.rope_scaling: None for plain rope, else the dict with `rope_type`
    (old configs say `type`); YaRN's original context and factor filled in where HF fills them in
    (standardize_rope_params, _compute_yarn_parameters), so the rotary code reads both as given."""
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)}); "
                         f"set rope_scaling / rope_parameters in config.json to one of them")
    if rope_type == "default":
        return None
    scaling = {**{k: v for k, v in rope.items() if k != "type"}, "rope_type": rope_type}
    if rope_type == "yarn":
        max_len = hf.get("max_position_embeddings", 4096)
        # a top-level original_max_position_embeddings wins (Phi-3 style), as in HF
        original = hf.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings") \
            or max_len
        factor = scaling.get("factor")
        scaling.update(original_max_position_embeddings=original,
                       factor=max_len / original if factor is None else factor)  # DeepSeek-style: implied
    return scaling


def rope_attention_factor(scaling: dict[str, Any] | None) -> float:
    """The factor HF multiplies cos and sin by (so q.k by its square), as _compute_yarn_parameters sets it:
    the config's attention_factor, else mscale / mscale_all_dim's ratio of two 0.1 m ln(factor) + 1 terms,
    else YaRN's 0.1 ln(factor) + 1; 1 for the other rope types."""
    if (scaling or {}).get("rope_type") != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor, mscale, mscale_all_dim = scaling["factor"], scaling.get("mscale"), scaling.get("mscale_all_dim")

    def get_mscale(m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if mscale and mscale_all_dim:
        return float(get_mscale(mscale) / get_mscale(mscale_all_dim))
    return get_mscale()


def _max_positions(max_len: int, rope_scaling: dict[str, Any] | None) -> int:
    """YaRN stretches the original context `factor` times (Qwen3's 32K -> 128K, Qwen3-Next's 256K -> 1M) and
    configs often keep the original max_position_embeddings: the rotary tables cover the stretched one."""
    if (rope_scaling or {}).get("rope_type") != "yarn":
        return max_len
    return max(max_len, int(rope_scaling["original_max_position_embeddings"] * rope_scaling["factor"]))


def _qwen4_exp_fields(hf: dict[str, Any], layer_types: tuple[str, ...]) -> dict[str, Any]:
    """Qwen4-Exp's extra fields, checked as HF's config checks them: every mistake names its field
    before any weight loads."""
    def need(ok: bool, field_name: str, why: str) -> None:
        if not ok:
            raise ValueError(f"Qwen4-Exp config: {field_name} {why} (got {hf.get(field_name)!r})")

    hc_count = hf.get("hc_count", 4)
    need(isinstance(hc_count, int) and hc_count > 1, "hc_count", "must be an integer > 1")
    need(hf.get("num_experts", 0) > 0, "num_experts", "must be > 0")
    bad_types = sorted(set(layer_types) - {"linear_attention", "full_attention", "indexed_attention"})
    need(not bad_types, "layer_types", f"may only hold linear_attention / indexed_attention, not {bad_types}")
    gate = hf.get("output_gate_type") or hf.get("hidden_act", "silu")
    need(gate in ("silu", "sigmoid"), "output_gate_type", "must be silu or sigmoid")
    fields: dict[str, Any] = dict(hc_count=hc_count, hc_lowrank=hf.get("hc_lowrank", 320), linear_gate_activation=gate)
    qsa = {name: hf.get(name) for name in ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim",
                                           "indexer_budget", "indexer_compress_ratio")}
    if any(v is not None for v in qsa.values()):
        # a compress ratio of 0 (from a GGUF: gguf_qwen4exp) keeps the indexers unread, dense attention
        for name, value in qsa.items():
            need(isinstance(value, int) and (value > 0 or (name == "indexer_compress_ratio" and value == 0)), name,
                 "must be a positive integer when QSA is configured")
        need(qsa["indexer_kv_heads"] == 1, "indexer_kv_heads", "must be 1")
        need(qsa["indexer_compress_ratio"] == 0 or qsa["indexer_budget"] % qsa["indexer_compress_ratio"] == 0,
             "indexer_budget", f"must be divisible by indexer_compress_ratio = {qsa['indexer_compress_ratio']}")
        fields.update(indexer_n_heads=qsa["indexer_n_heads"], indexer_head_dim=qsa["indexer_head_dim"],
                      indexer_budget=qsa["indexer_budget"], indexer_compress_ratio=qsa["indexer_compress_ratio"])
    ple_ids = sorted(set(hf.get("ple_layer_ids") or ()))
    if ple_ids:
        num_layers, hidden = hf["num_hidden_layers"], hf["hidden_size"]
        need(all(1 <= i <= num_layers for i in ple_ids), "ple_layer_ids", f"must be 1-based layer ids in [1, {num_layers}]")
        need(all(layer_types[i - 1] == "linear_attention" for i in ple_ids), "ple_layer_ids",
             "may only name linear_attention layers")
        ngram_size, heads = hf.get("ngram_size", 3), hf.get("heads_per_ngram", 8)
        embed_dim = hf.get("ple_embed_dim") or hidden
        need(ngram_size >= 2 and heads > 0 and embed_dim % ((ngram_size - 1) * heads) == 0, "ple_embed_dim",
             "must be divisible by the n-gram heads (ngram_size - 1) * heads_per_ngram")
        need(hf.get("eos_token_id") not in (None, []), "eos_token_id", "must be set when PLE layers are enabled")
        fields.update(ple_layers=tuple(i - 1 for i in ple_ids), ple_embed_dim=embed_dim,
                      ple_conv_kernel_size=hf.get("ple_conv_kernel_size", 4), ngram_size=ngram_size,
                      heads_per_ngram=heads, ngram_vocab_size_base=hf.get("ngram_vocab_size_base", 20_000_000),
                      ngram_vocab_size_multiple=hf.get("make_ngram_vocab_size_divisible_by", 128),
                      ngram_seed=hf.get("seed", 1234), ngram_table_shards=hf.get("split_ngram_parts", 512))
    return fields
