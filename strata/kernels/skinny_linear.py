"""Dense projections of single-token steps (a row or a few against a large weight) as one Triton launch.

y = x @ W.T (+ b) for x [M <= 16, K]: each program owns BLOCK_N output columns (BLOCK_N contiguous rows
of W) and streams them through a K loop, multiplying and summing on the CUDA cores over the real rows
(no tensor-core padding of M to 16, no split-K and so no reduction launch: cuBLAS's GEMV-shaped kernels
add one), and it launches with PDL like the Triton kernels around it. Loading the first weight tile
before the PDL wait measured slower on the H200 (session 7, call 5), so every load of that kernel
follows the wait.

A single row against a weight small enough that one program per SM can hold its share in registers
(o_proj of Qwen3-30B-A3B: 16 rows x 4096 = 128 KB a program, 128 programs) takes `_preloaded_row_kernel`
instead: each program loads its whole slice of W before the PDL wait, so with the early trigger of
strata.kernels.launch the weight streams in while attention still runs, and after the wait only x is
read.
"""

from __future__ import annotations

import functools

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


# a preloading program holds at most this much of the weight, at most PRELOAD_ELEMS_PER_THREAD elements a thread
PRELOAD_MAX_BYTES = 128 * 1024
PRELOAD_ELEMS_PER_THREAD = 128


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def preload_rows(num_cols: int, dim_in: int, element_size: int, num_sms: int) -> int:
    """Weight rows per program when one program per SM can hold its slice of a [num_cols, dim_in] weight
    in registers (at most PRELOAD_MAX_BYTES), else 0."""
    block_n = _next_power_of_2(-(-num_cols // num_sms))
    fits = block_n * _next_power_of_2(dim_in) * element_size <= PRELOAD_MAX_BYTES
    return block_n if fits else 0


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  config: dict | None = None, preload: bool | None = None) -> torch.Tensor:
    """Same contract as skinny_linear_ref for at most MAX_ROWS rows and a contiguous weight. `preload`
    None takes _preloaded_row_kernel wherever it applies (one row, a weight that fits), False never."""
    num_rows, dim_in = x.shape
    num_cols = weight.shape[0]
    assert num_rows <= MAX_ROWS and weight.is_contiguous() and x.stride(1) == 1 and weight.shape[1] == dim_in
    block_n = preload_rows(num_cols, dim_in, weight.element_size(), _num_sms(x.device.index or 0)) \
        if num_rows == 1 and preload is not False and config is None else 0
    if block_n:
        return _preloaded_row(x, weight, bias, block_n)
    cfg = config or DEFAULT_CONFIG
    block_n = cfg["BLOCK_N"]
    out = torch.empty(num_rows, num_cols, dtype=x.dtype, device=x.device)
    _skinny_linear_kernel[(triton.cdiv(num_cols, block_n),)](
        x, weight, bias if bias is not None else weight, out, num_rows, num_cols, dim_in, x.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, BLOCK_M=triton.next_power_of_2(num_rows), BLOCK_N=block_n, BLOCK_K=cfg["BLOCK_K"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))
    return out


def _preloaded_row(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, block_n: int) -> torch.Tensor:
    """x [1, K] @ weight.T: one program per BLOCK_N weight rows, each holding its slice in registers."""
    num_cols, dim_in = weight.shape
    k_pad = triton.next_power_of_2(dim_in)
    warps = min(16, max(1, block_n * k_pad // (PRELOAD_ELEMS_PER_THREAD * 32)))
    out = torch.empty(1, num_cols, dtype=x.dtype, device=x.device)
    _preloaded_row_kernel[(triton.cdiv(num_cols, block_n),)](
        x, weight, bias if bias is not None else weight, out, num_cols,
        HAS_BIAS=bias is not None, DIM_IN=dim_in, BLOCK_N=block_n, K_PAD=k_pad,
        EVEN=num_cols % block_n == 0 and dim_in == k_pad, num_warps=warps, **pdl_options(x))
    return out


if triton is not None:

    @triton.jit
    def _preloaded_row_kernel(x_ptr, w_ptr, b_ptr, out_ptr, num_cols, HAS_BIAS: tl.constexpr, DIM_IN: tl.constexpr,
                              BLOCK_N: tl.constexpr, K_PAD: tl.constexpr, EVEN: tl.constexpr, USE_PDL: tl.constexpr):
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, K_PAD)
        n_ok, k_ok = offs_n < num_cols, offs_k < DIM_IN
        # the weight does not depend on the previous kernels: the whole slice loads before the wait
        w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * DIM_IN + offs_k[None, :]                   # [BN, KP]
        if EVEN:  # no masks: one base address and constant offsets (fewer registers held across the wait)
            w = tl.load(w_ptrs)
        else:
            w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        wait_for_previous_kernel(USE_PDL)
        x = tl.load(x_ptr + offs_k, mask=k_ok, other=0.0)                                         # [KP]
        acc = tl.sum(w.to(tl.float32) * x[None, :].to(tl.float32), axis=1)                       # [BN]
        if HAS_BIAS:
            acc += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs_n, acc.to(out_ptr.dtype.element_ty), mask=n_ok)

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
