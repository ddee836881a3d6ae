"""Qwen4-Exp's hyper-connections: the residual is `hc_count` streams of `hidden` floats per token. Each block
reads a mix of the streams and writes its output back into every stream with a learned per-stream weight;
the model's last mixer folds the streams into the hidden state the LM head reads (there is no final norm).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from strata.config import ModelConfig
from strata.model.linear import Linear


class GroupRMSNorm(nn.Module):
    """Zero-centred RMSNorm of each `group`-sized slice of the last dim: x [..., G * group] -> same shape,
    (1 + weight) * x̂ with weight [G * group], in float32 like HF's."""

    def __init__(self, dim: int, group: int, eps: float) -> None:
        super().__init__()
        self.group, self.eps = group, eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float().unflatten(-1, (-1, self.group))
        x32 = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        return (x32 * (1.0 + self.weight.float())).to(x.dtype)


class HyperConnection(nn.Module):
    """streams [T, hc * D] -> (block input [T, D], and with `inject`, per-stream write weights [T, hc]).

    The block input is the mean over streams of sigmoid(up(silu(down(x̂) / hc))) * x̂, x̂ the streams normed
    one by one; the write weights are 2 sigmoid(inject(x̂) / hc)."""

    def __init__(self, cfg: ModelConfig, inject: bool = True) -> None:
        super().__init__()
        self.hc, hidden = cfg.hc_count, cfg.hidden_size
        width = self.hc * hidden
        self.hc_norm = GroupRMSNorm(width, hidden, cfg.rms_norm_eps)
        self.input_mix_weight_down = Linear(width, cfg.hc_lowrank, bias=False)
        self.input_mix_weight_up = Linear(cfg.hc_lowrank, width, bias=False)
        self.block_inject_weight = Linear(width, self.hc, bias=False) if inject else None

    def forward(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        normed = self.hc_norm(streams)                                                       # [T, hc * D]
        mix = torch.sigmoid(self.input_mix_weight_up(F.silu(self.input_mix_weight_down(normed) / self.hc)))
        block_input = (mix * normed).unflatten(-1, (self.hc, -1)).mean(dim=-2)               # [T, D]
        if self.block_inject_weight is None:
            return block_input, None
        return block_input, 2 * torch.sigmoid(self.block_inject_weight(normed) / self.hc)   # [T, hc]


def inject(streams: torch.Tensor, output: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """streams [T, hc * D] + a block's output [T, D] written into stream s with weight weights[:, s] [T, hc]."""
    return streams + (output.unsqueeze(-2) * weights.unsqueeze(-1)).flatten(-2)
