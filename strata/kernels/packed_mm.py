"""Projections of a few rows (up to 16) over packed GGUF blocks on the tensor cores: each weight decoded once
in registers, to x's 16-bit type, and multiplied with every row of x by one MMA a K step.

packed_q8 (8-bit activations, dp4a) reads a weight word once but spends a dp4a, an integer add and a scaling
per row of x on it: at 8 rows the Q6_K LM heads take ~3.6x their copy time (568.8 us for Qwen4-Exp's 248,320 x
2,560 head, session 30), and steps of more rows dequantize the whole weight to a temporary (written and read
again) before a cuBLAS GEMM. Here the decode costs the same whatever the rows (packed_gemv's block readers,
`_chunk_values`, as packed_dequant uses them) and the rows' products are one tl.dot of [BLOCK_M, 256 SB] by
[256 SB, BLOCK_N] per K step.

What is computed: y = x @ W16.T with W16 gguf's dequantized weight rounded once to x's dtype (bf16 / f16) and
float32 sums: the numbers of `dequantize` then a 16-bit GEMM (ops.packed_linear's path past packed_q8's rows),
up to summation order. x keeps its own bits (no 8-bit rounding). Types: every type packed_gemv reads.

Not yet dispatched by ops.packed_linear: tools/gpu_ab/packed_mm_ab.py times it against packed_q8 and against
dequantize + GEMM on the LM heads and the 30B-A3B's projections at 1-16 rows first.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

from strata.kernels import packed_gemv
from strata.kernels.gguf_blocks import dequantize_ref
from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.packed_gemv import _chunk_ok, _chunk_values

MAX_ROWS = 16
DEFAULT_CONFIG = dict(BLOCK_N=64, SUPERBLOCKS=1, num_warps=4, num_stages=2)


def supports(qtype: int, k: int) -> bool:
    return packed_gemv.supports(qtype, k)


def packed_mm_ref(x: torch.Tensor, blocks: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    """The contract: x [M, K] (16-bit) @ (gguf's dequantized W [N, K] rounded to x's dtype).T, float32 sums ->
    float32 [M, N]."""
    weight = dequantize_ref(blocks, qtype, k).to(x.dtype).float()
    return x.float() @ weight.t()


def packed_mm(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int, config: dict | None = None,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M <= MAX_ROWS, K] (bf16 or f16, unit column stride) @ blocks uint8 [N, row_bytes] transposed ->
    [M, N] (float32, or into `out`: [M, N], any float dtype, unit column stride) as packed_mm_ref says: one
    program per BLOCK_N rows of W for every row of x."""
    num_rows = x.shape[0]
    assert num_rows <= MAX_ROWS and x.shape[1] == k and x.stride(1) == 1 and x.dtype in (torch.bfloat16, torch.float16)
    assert supports(qtype, k) and blocks.dtype == torch.uint8 and blocks.shape[0] == n and blocks.stride(1) == 1
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    if out is None:
        out = torch.empty(num_rows, n, dtype=torch.float32, device=x.device)
    assert out.shape == (num_rows, n) and out.stride(1) == 1
    superblocks = packed_gemv.chunks_per_step(cfg["SUPERBLOCKS"], k)
    _packed_mm_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](
        x, blocks, out, num_rows, n, k, x.stride(0), blocks.stride(0), out.stride(0),
        QTYPE=qtype, BLOCK_M=max(16, triton.next_power_of_2(num_rows)), BLOCK_N=cfg["BLOCK_N"], SB=superblocks,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))
    return out


if triton is not None:

    @triton.jit
    def _packed_mm_kernel(x_ptr, w_ptr, out_ptr, m, n, k, stride_xm, row_stride, stride_om, QTYPE: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, USE_PDL: tl.constexpr):
        """One program per BLOCK_N rows of W: per K step, SB chunks of 256 weights decoded to [BLOCK_N, 256 SB]
        in x's dtype and one MMA with x's [BLOCK_M, 256 SB] tile (rows past m and columns past K are zeros)."""
        wait_for_previous_kernel(USE_PDL)
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = (offs_n < n)[:, None, None, None]                                             # [BN, 1, 1, 1]
        w_rows = w_ptr + offs_n.to(tl.int64)[:, None, None, None] * row_stride
        r = tl.arange(0, 8)[None, None, :, None]
        l = tl.arange(0, 32)[None, None, None, :]
        offs_m = tl.arange(0, BLOCK_M)
        m_ok = (offs_m < m)[:, None]
        x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for sb in tl.range(0, tl.cdiv(k, 256), SB):
            ok = _chunk_ok(n_ok, sb, r, k, QTYPE, SB)                                       # [BN, SB, 8, 1]
            values = _chunk_values(w_rows, sb, r, l, ok, QTYPE, SB, BLOCK_N)                 # [BN, SB, 8, 32]
            w = tl.reshape(tl.where(ok, values, 0.0), (BLOCK_N, SB * 256)).to(x_ptr.dtype.element_ty)
            cols = sb * 256 + tl.arange(0, SB * 256)
            x = tl.load(x_rows + cols[None, :], mask=m_ok & (cols < k)[None, :], other=0.0)  # [BM, 256 SB]
            acc = tl.dot(x, tl.trans(w), acc)
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=m_ok & (offs_n < n)[None, :])
