"""Qwen3MoeForCausalLM: Qwen3 attention (q/k norms) with sparse MoE MLPs (top-k, norm_topk_prob),
dense MLPs on `mlp_only_layers` and between sparse steps."""

from __future__ import annotations

from strata.model.attention import Attention
from strata.model.decoder import CausalLM, DecoderLayer
from strata.model.mlp import DenseMLP
from strata.model.moe import MoEBlock


class Qwen3MoeForCausalLM(CausalLM):
    def build_layer(self, layer_idx: int) -> DecoderLayer:
        cfg = self.config
        mlp = MoEBlock(cfg) if cfg.is_moe_layer(layer_idx) else DenseMLP(cfg.hidden_size, cfg.intermediate_size)
        return DecoderLayer("self_attn", Attention(cfg, layer_idx), mlp, cfg.hidden_size, cfg.rms_norm_eps)
