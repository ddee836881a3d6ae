"""Dense projections of single-token steps (a row or a few against a large weight) as one Triton launch.

y = x @ W.T (+ b) for x [M <= 16, K]: each program owns BLOCK_N output columns (BLOCK_N contiguous rows
of W) and streams them through a K loop, multiplying and summing on the CUDA cores over the real rows
(no tensor-core padding of M to 16, no split-K and so no reduction launch: cuBLAS's GEMV-shaped kernels
add one), and it launches with PDL like the Triton kernels around it. Loading the first weight tile
before the PDL wait measured slower on the H200 (session 7, call 5), so every load follows the wait.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: skinny_linear_ref still works
    triton = tl = None

from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel

MAX_ROWS = 16


def skinny_linear_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K], weight [N, K], bias [N] -> [M, N] in x's dtype: torch's linear."""
    return F.linear(x, weight, bias)


# two columns per program, 1024-wide K tiles: the best of nine tilings at one row on the H200 for
# Qwen3-30B-A3B's qkv and o_proj shapes (bench/results/2026-11-30-h200-session7/call3/skinny_bench.log)
DEFAULT_CONFIG = dict(BLOCK_N=2, BLOCK_K=1024, num_warps=4, num_stages=4)


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  config: dict | None = None) -> torch.Tensor:
    """Same contract as skinny_linear_ref for at most MAX_ROWS rows and a contiguous weight."""
    num_rows, dim_in = x.shape
    num_cols = weight.shape[0]
    assert num_rows <= MAX_ROWS and weight.is_contiguous() and x.stride(1) == 1 and weight.shape[1] == dim_in
    cfg = config or DEFAULT_CONFIG
    block_n = cfg["BLOCK_N"]
    out = torch.empty(num_rows, num_cols, dtype=x.dtype, device=x.device)
    _skinny_linear_kernel[(triton.cdiv(num_cols, block_n),)](
        x, weight, bias if bias is not None else weight, out, num_rows, num_cols, dim_in, x.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, BLOCK_M=triton.next_power_of_2(num_rows), BLOCK_N=block_n, BLOCK_K=cfg["BLOCK_K"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))
    return out


if triton is not None:

    @triton.jit
    def _skinny_linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, num_rows, num_cols, dim_in, stride_xm, stride_om,
                              HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        first_col = tl.program_id(0) * BLOCK_N
        offs_m = tl.arange(0, BLOCK_M)
        offs_n = first_col + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        m_ok, n_ok = offs_m < num_rows, offs_n < num_cols
        x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]                    # [BM, BK]
        w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * dim_in + offs_k[None, :]          # [BN, BK]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, dim_in, BLOCK_K):
            k_ok = offs_k < dim_in - k0
            x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            acc += tl.sum(x[:, None, :].to(tl.float32) * w[None, :, :].to(tl.float32), axis=2)  # [BM, BN]
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        if HAS_BIAS:
            acc += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=m_ok[:, None] & n_ok[None, :])
