"""nn.Linear whose single-row calls on CUDA take one Triton launch (strata.kernels.skinny_linear, chosen
by ops.linear): a decode step of one sequence, where cuBLAS picks a split-K GEMV plus a reduction launch
and breaks the chain of kernels launched with PDL. Everything else (more rows, float32, the CPU) keeps
torch's linear. STRATA_NO_SKINNY_LINEAR=1 turns it off."""

from __future__ import annotations

import torch
from torch import nn

from strata.model import ops


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight, self.bias)
