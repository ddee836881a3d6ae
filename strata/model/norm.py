"""RMSNorm in the two flavours our models use: plain (weight * x̂) and zero-centred ((1 + weight) * x̂,
Qwen3-Next). Both normalise in float32 and cast back, like the HF references."""

from __future__ import annotations

import torch
from torch import nn

from strata.kernels.rms_norm import gated_rms_norm_ref
from strata.model import ops
from strata.model.moe import TopkPartials


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, zero_centered: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.zero_centered = zero_centered
        self.weight = nn.Parameter(torch.zeros(dim) if zero_centered else torch.ones(dim))
        # packed weights with 8-bit activations read the output next (set by CausalLM.load_weights): the
        # norm's launch then rounds it for them, one quantize launch fewer (ops.rms_norm's for_packed)
        self.feeds_packed = False

    def forward(self, x: torch.Tensor | TopkPartials, residual: torch.Tensor | None = None):
        """x [..., D] -> normalised x; with `residual`, (norm(x + residual), x + residual): the residual
        add fused into the norm (one Triton launch on CUDA). x may be an MoE layer's TopkPartials (with a
        residual): their sum is folded in too."""
        if isinstance(x, TopkPartials):
            out, new_residual = ops.rms_norm_topk_sum(x.partials, x.shared, self.weight, self.eps, self.zero_centered,
                                                      residual, x.dtype, self.feeds_packed, x.shared_gate)
        else:
            out, new_residual = ops.rms_norm(x, self.weight, self.eps, self.zero_centered, residual, self.feeds_packed)
        return out if residual is None else (out, new_residual)


class GatedRMSNorm(nn.Module):
    """The norm on the delta-rule output: weight * x̂ * act(gate), in float32; act is silu (Qwen3-Next,
    Qwen3.5) or sigmoid (Qwen4-Exp). On CUDA the Gated DeltaNet layer runs it as ops.gated_rms_norm."""

    def __init__(self, dim: int, eps: float, activation: str = "silu") -> None:
        super().__init__()
        if activation not in ("silu", "sigmoid"):
            raise ValueError(f"gated norm activation must be one of silu, sigmoid, got {activation!r}")
        self.eps = eps
        self.activation_name = activation
        self.weight = nn.Parameter(torch.ones(dim))
        # a packed out_proj with 8-bit activations reads the output next (set by CausalLM.load_weights): the
        # CUDA launch then rounds it for it (ops.gated_rms_norm's for_packed)
        self.feeds_packed = False

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return gated_rms_norm_ref(x, gate, self.weight, self.eps, self.activation_name)
