"""A float32 linear on the CPU whose rows do not depend on each other (native/row_linear_cpu.c, in cpu_quant's
library and on its thread pool): each output is summed in an order fixed by K alone, so a token's result is the
same in a decode step, a verification window and a prompt. torch's GEMM blocks its sums by the row count (a
128 x 2,048 router moved its logits up to 8.2e-5 between 1 and 12 rows on the development VM), and a MoE
router's top-k turns such a difference into another expert. ops.row_wise_linear takes it (else one F.linear a
row: a 4-row decode step of Qwen3-Next's 512 x 2,048 router paid four reads of its weight)."""

from __future__ import annotations

import functools

import numpy as np
import torch

from strata.kernels import cpu_quant

# multiply-adds under which one thread does a call: waking the pool costs more
_ONE_THREAD_WORK = 1 << 17


def available() -> bool:
    """The native library is built here with the kernel (else the caller multiplies row by row)."""
    library = cpu_quant._load()
    return library is not None and hasattr(library, cpu_quant._LINEAR)


def fits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """x [T, K] and weight [N, K] (bias [N]) are CPU float32 tensors the kernel reads as they are."""
    return (x.dim() == 2 and weight.dim() == 2 and x.shape[1] == weight.shape[1] and not x.is_cuda
            and x.dtype == weight.dtype == torch.float32 and weight.device.type == "cpu"
            and x.is_contiguous() and weight.is_contiguous()
            and (bias is None
                 or (bias.dtype == torch.float32 and bias.is_contiguous() and bias.shape == weight.shape[:1])))


def row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, K] @ weight.T (+ bias) -> [T, N] float32, each row's sums independent of the other rows and of the
    threads. Check fits() first."""
    if not fits(x, weight, bias):
        raise ValueError(f"cpu_linear.row_linear: x {x.dtype} {tuple(x.shape)} and weight {weight.dtype} "
                         f"{tuple(weight.shape)} must be contiguous CPU float32 [T, K] and [N, K]")
    rows, (n, k) = x.shape[0], weight.shape
    y = torch.from_numpy(np.empty((rows, n), np.float32))                  # [T, N]
    threads = 1 if rows * n * k < _ONE_THREAD_WORK else cpu_quant._threads()
    chunk = max(8, -(-n // (4 * threads)))                                  # ~4 items a thread
    _kernel()(x.data_ptr(), rows, weight.data_ptr(), n, k, 0 if bias is None else bias.data_ptr(), y.data_ptr(),
              chunk, threads)
    return y


@functools.cache
def _kernel():
    """The AVX2 build where the CPU has it (the same bits: no fused multiply-adds, sums in a fixed order)."""
    return cpu_quant.entry(cpu_quant._LINEAR, cpu_quant._LINEAR_AVX2)
