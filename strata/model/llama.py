"""Dense decoders: LlamaForCausalLM and Qwen3ForCausalLM (Llama plus RMSNorm on q and k per head)."""

from __future__ import annotations

from strata.model.attention import Attention
from strata.model.decoder import CausalLM, DecoderLayer
from strata.model.mlp import DenseMLP


class LlamaForCausalLM(CausalLM):
    def build_layer(self, layer_idx: int) -> DecoderLayer:
        cfg = self.config
        return DecoderLayer("self_attn", Attention(cfg, layer_idx),
                            DenseMLP(cfg.hidden_size, cfg.intermediate_size),
                            cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Same layer as Llama; `ModelConfig.qk_norm` is set for Qwen3 and turns on the q/k norms."""
