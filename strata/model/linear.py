"""nn.Linear whose single-row calls on CUDA take one Triton launch (strata.kernels.skinny_linear): a
decode step of one sequence, where cuBLAS picks a split-K GEMV plus a reduction launch and breaks the
chain of kernels launched with PDL. Everything else (more rows, float32, the CPU) keeps torch's linear.
STRATA_NO_SKINNY_LINEAR=1 turns it off."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from strata.kernels import skinny_linear, triton_available


@functools.cache
def _skinny_enabled() -> bool:
    from strata.config import debug_flag

    return triton_available() and not debug_flag("NO_SKINNY_LINEAR")


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.is_cuda and x.dim() == 2 and x.shape[0] == 1 and x.dtype == self.weight.dtype
                and x.dtype in (torch.bfloat16, torch.float16) and self.weight.is_contiguous() and _skinny_enabled()):
            return skinny_linear.skinny_linear(x if x.stride(1) == 1 else x.contiguous(), self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)
