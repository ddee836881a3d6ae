"""Qwen3-Next's MTP (multi-token prediction) draft head: the weights under `mtp.*` in the checkpoint.

One step maps (embedding of the next token, target hidden state after the final norm) to a hidden
state for the shared lm_head: `norm(layer(fc(cat(norm_e(embed), norm_h(hidden)))))`. The head owns no
embedding or lm_head (the target's are shared); its one full-attention layer keeps its own paged KV
cache, at `ctx.kv_caches[num_hidden_layers]`.
"""

from __future__ import annotations

import torch
from torch import nn

from strata.config import ModelConfig
from strata.model.context import ForwardContext
from strata.model.decoder import DecoderLayer
from strata.model.norm import RMSNorm


class MTPHead(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: DecoderLayer) -> None:
        """`layer` is a full-attention decoder layer of the target's kind, with layer index
        `cfg.num_hidden_layers` (its KV-cache key)."""
        super().__init__()
        if cfg.num_mtp_layers != 1:
            raise ValueError(f"the checkpoint has {cfg.num_mtp_layers} MTP layers; Strata supports exactly 1 "
                             f"(set num_nextn_predict_layers to 0 in config.json to load without the MTP head)")
        dim, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.pre_fc_norm_embedding = RMSNorm(dim, eps, zero_centered=True)
        self.pre_fc_norm_hidden = RMSNorm(dim, eps, zero_centered=True)
        self.fc = nn.Linear(2 * dim, dim, bias=False)
        self.layers = nn.ModuleList([layer])
        self.norm = RMSNorm(dim, eps, zero_centered=True)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """embeds [T, D] (target embedding of each token), hidden [T, D] -> draft hidden [T, D]."""
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], dim=-1))
        return self.norm(*self.layers[0](x, ctx))[0]
