"""Qwen4-Exp's hyper-connections: the residual is `hc_count` streams of `hidden` floats per token. Each block
reads a mix of the streams and writes its output back into every stream with a learned per-stream weight;
the model's last mixer folds the streams into the hidden state the LM head reads (there is no final norm).
"""

from __future__ import annotations

import torch
from torch import nn

from strata.config import ModelConfig
from strata.kernels.hyper import group_rms_norm_ref, hyper_mix_ref
from strata.model import ops
from strata.model.linear import Linear
from strata.model.packed import PackedWeight


class GroupRMSNorm(nn.Module):
    """Zero-centred RMSNorm of each `group`-sized slice of the last dim: x [..., G * group] -> same shape,
    (1 + weight) * x̂ with weight [G * group], in float32 like HF's."""

    def __init__(self, dim: int, group: int, eps: float) -> None:
        super().__init__()
        self.group, self.eps = group, eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return group_rms_norm_ref(x, self.weight, self.group, self.eps)


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

    def forward(self, streams: torch.Tensor, rows_alike: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(block input [T, D], write weights [T, hc] or None); two launches for decode rows on CUDA.
        `rows_alike`: each row rounds alike whatever rows come with it (ops.hyper_mix). Weights kept as a GGUF
        file's blocks (a CPU run; packed.dense_on_gpu) compute through their Linears (ops.packed_linear, which
        is row-invariant)."""
        projections = (self.input_mix_weight_down, self.input_mix_weight_up, self.block_inject_weight)
        if any(p is not None and isinstance(p.weight, PackedWeight) for p in projections):
            return hyper_mix_ref(streams, self.hc_norm.weight, *projections, self.hc, self.hc_norm.eps)
        inject = None if self.block_inject_weight is None else self.block_inject_weight.weight
        return ops.hyper_mix(streams, self.hc_norm.weight, self.input_mix_weight_down.weight,
                             self.input_mix_weight_up.weight, inject, self.hc, self.hc_norm.eps, rows_alike)


def inject(streams: torch.Tensor, output, weights: torch.Tensor) -> torch.Tensor:
    """streams [T, hc * D] + a block's output [T, D] (or an MoE block's unsummed moe.TopkPartials) written
    into stream s with weight weights[:, s] [T, hc] (one launch)."""
    return ops.inject(streams, output, weights)
