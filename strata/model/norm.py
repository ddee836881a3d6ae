"""RMSNorm in the two flavours our models use: plain (weight * x̂) and zero-centred ((1 + weight) * x̂,
Qwen3-Next). Both normalise in float32 and cast back, like the HF references."""

from __future__ import annotations

import torch
from torch import nn

from strata.model import ops
from strata.model.moe import TopkPartials


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, zero_centered: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.zero_centered = zero_centered
        self.weight = nn.Parameter(torch.zeros(dim) if zero_centered else torch.ones(dim))

    def forward(self, x: torch.Tensor | TopkPartials, residual: torch.Tensor | None = None):
        """x [..., D] -> normalised x; with `residual`, (norm(x + residual), x + residual): the residual
        add fused into the norm (one Triton launch on CUDA). x may be an MoE layer's TopkPartials (with a
        residual): their sum is folded in too."""
        if isinstance(x, TopkPartials):
            out, new_residual = ops.rms_norm_topk_sum(x.partials, x.shared, self.weight, self.eps, self.zero_centered,
                                                      residual, x.dtype)
        else:
            out, new_residual = ops.rms_norm(x, self.weight, self.eps, self.zero_centered, residual)
        return out if residual is None else (out, new_residual)


class GatedRMSNorm(nn.Module):
    """The norm on the delta-rule output: weight * x̂ * act(gate), in float32; act is silu (Qwen3-Next,
    Qwen3.5) or sigmoid (Qwen4-Exp)."""

    def __init__(self, dim: int, eps: float, activation: str = "silu") -> None:
        super().__init__()
        if activation not in _GATE_ACTIVATIONS:
            raise ValueError(f"gated norm activation must be one of {', '.join(_GATE_ACTIVATIONS)}, got {activation!r}")
        self.eps = eps
        self.activation = _GATE_ACTIVATIONS[activation]
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        x32 = self.weight * x32.to(x.dtype)
        return (x32 * self.activation(gate.float())).to(x.dtype)


_GATE_ACTIVATIONS = {"silu": nn.functional.silu, "sigmoid": torch.sigmoid}
