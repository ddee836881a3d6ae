"""nn.Linear whose weight is a dense tensor or a PackedWeight (GGUF blocks, strata.model.packed).

Dense: single-row calls on CUDA take one Triton launch (strata.kernels.skinny_linear, chosen by ops.linear):
a decode step of one sequence, where cuBLAS picks a split-K GEMV plus a reduction launch and breaks the
chain of kernels launched with PDL. Everything else (more rows, float32, the CPU) keeps torch's linear.
STRATA_NO_SKINNY_LINEAR=1 turns it off. Packed: ops.packed_linear. `row_invariant` modules: ops.row_wise_linear.
"""

from __future__ import annotations

import torch
from torch import nn

from strata.model import ops
from strata.model.packed import PackedWeight


class Linear(nn.Linear):
    # set on a module whose CPU rows must not depend on the rows beside them (ops.row_wise_linear): those whose
    # output feeds a top-k (the QSA indexer's) or gates a whole branch (a shared expert's), so a verification
    # window's token computes what plain decoding's does; packed weights are row-invariant already
    row_invariant = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.weight, PackedWeight):
            return ops.packed_linear(x, self.weight, self.bias)
        if self.row_invariant:
            return ops.row_wise_linear(x, self.weight, self.bias)
        return ops.linear(x, self.weight, self.bias)

    @classmethod
    def packed(cls, dense: nn.Linear, weight: PackedWeight) -> Linear:
        """A Linear computing with `weight` [out_features, in_features] in place of `dense` (whose bias, and
        fused-shard sizes if any, it keeps)."""
        if tuple(weight.shape) != (dense.out_features, dense.in_features):
            raise ValueError(f"packed weight {tuple(weight.shape)} does not fit a Linear({dense.in_features}, "
                             f"{dense.out_features})")
        linear = cls(dense.in_features, dense.out_features, bias=False, device="meta")
        del linear.weight
        linear.weight = weight
        linear.bias = dense.bias
        if hasattr(dense, "shard_sizes"):
            linear.shard_sizes = dense.shard_sizes
        return linear
