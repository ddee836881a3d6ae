"""Dense SwiGLU MLP with a fused gate/up projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from strata.kernels.rms_norm import gated_shared_ref
from strata.model import ops
from strata.model.linear import Linear


class DenseMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.gate_up_proj.shard_sizes = (intermediate_size, intermediate_size)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, gate: nn.Linear | None = None) -> torch.Tensor:
        """x [T, D] -> [T, D]; with `gate` (Qwen3-Next's shared-expert gate, D -> 1) times sigmoid(gate(x)).
        One CUDA row takes two launches in all (ops.gated_mlp) where ops.skinny_mlp_on holds."""
        return gated_shared_ref(*self.forward_ungated(x, gate))

    def forward_ungated(self, x: torch.Tensor, gate: nn.Linear | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """forward, with the gate left to the caller where it is not applied already: (out [T, D], gate(x)
        [T, 1] or None). The one-row CUDA kernel (ops.gated_mlp) applies it itself."""
        weights = (self.gate_up_proj.weight, self.down_proj.weight) + ((gate.weight,) if gate is not None else ())
        if ops.skinny_mlp_on(x, *weights):
            return ops.gated_mlp(x, *weights), None
        g, up = self.gate_up_proj(x).chunk(2, dim=-1)  # [T, I] each
        return self.down_proj(F.silu(g) * up), (gate(x) if gate is not None else None)
