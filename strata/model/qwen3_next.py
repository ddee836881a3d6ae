"""Qwen3NextForCausalLM: hybrid layers (Gated DeltaNet linear attention and gated full attention, per
`layer_types`), sparse MoE with a sigmoid-gated shared expert, zero-centred RMSNorms, and the optional
MTP draft head loaded from the checkpoint's `mtp.*` tensors.

The recurrent state of the linear-attention layers lives in the runner's pools; this file only says
their per-slot shapes (`recurrent_state_shapes`).
"""

from __future__ import annotations

import torch

from strata.config import ModelConfig
from strata.model.attention import Attention
from strata.model.context import ForwardContext
from strata.model.decoder import CausalLM, DecoderLayer, build_part
from strata.model.gated_delta_net import GatedDeltaNet
from strata.model.mlp import DenseMLP
from strata.model.moe import MoEBlock
from strata.model.mtp import MTPHead


class Qwen3NextForCausalLM(CausalLM):
    zero_centered_norm = True
    grouped_qkvz = True  # the Gated DeltaNet checkpoint layout (see GatedDeltaNet)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.mtp = None
        if cfg.num_mtp_layers > 0:
            self.mtp = build_part("mtp.", cfg, lambda: MTPHead(cfg, self._layer(cfg.num_hidden_layers, linear=False,
                                                                                moe=cfg.num_experts > 0)))

    def build_layer(self, layer_idx: int) -> DecoderLayer:
        cfg = self.config
        return self._layer(layer_idx, cfg.is_linear_attention_layer(layer_idx), cfg.is_moe_layer(layer_idx))

    def _layer(self, layer_idx: int, linear: bool, moe: bool) -> DecoderLayer:
        cfg = self.config
        if linear:
            mixer_name, mixer = "linear_attn", GatedDeltaNet(cfg, layer_idx, self.grouped_qkvz)
        else:
            mixer_name, mixer = "self_attn", Attention(cfg, layer_idx, gated=True, zero_centered_norm=True)
        mlp = MoEBlock(cfg) if moe else DenseMLP(cfg.hidden_size, cfg.intermediate_size)
        return DecoderLayer(mixer_name, mixer, mlp, cfg.hidden_size, cfg.rms_norm_eps, zero_centered_norm=True)

    def recurrent_state_shapes(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        """Linear-attention layer -> (per-slot conv state [C, W-1], per-slot delta-rule state [Hv, Dk, Dv])."""
        return {i: layer.linear_attn.state_shapes() for i, layer in enumerate(self.model.layers)
                if layer.mixer_name == "linear_attn"}

    @property
    def has_mtp(self) -> bool:
        return self.mtp is not None

    def mtp_forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """input_ids [T] (the token after each position), hidden [T, D] (target, after the final norm)
        -> draft hidden [T, D]; `compute_logits` turns it into draft logits with the shared lm_head."""
        return self.mtp(self.model.embed_tokens(input_ids), hidden, ctx)

    def is_ignored_weight(self, name: str) -> bool:
        # with an MTP head, `mtp.*` tensors load into self.mtp under their own names
        if self.has_mtp and name.startswith("mtp."):
            return super().is_ignored_weight(name.removeprefix("mtp."))
        return super().is_ignored_weight(name)
