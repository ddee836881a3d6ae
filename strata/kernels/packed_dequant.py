"""GGUF blocks (the types packed_gemv reads: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
IQ4_XS and the i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) -> dense 16-bit weights on the GPU
in one launch.

Prompt-sized steps multiply by dense weights: they dequantize a packed projection (or a layer's used
experts) into a temporary and run the 16-bit GEMM. gguf_blocks.dequantize_ref does the same in a dozen
torch ops with float32 temporaries; this reads the blocks once and writes the weights once, decoding
with packed_gemv's block readers (_chunk_values), so it costs about a copy of the dense result.
"""

from __future__ import annotations

import torch

from strata.kernels import packed_gemv, packed_iquants, packed_q8, sm_copy
from strata.kernels.gguf_blocks import dequantize_ref

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: dequantize falls back to the torch form
    triton = tl = None

if triton is not None:
    from strata.kernels.packed_gemv import _chunk_ok, _chunk_values

CONFIG = dict(BLOCK_N=8, SUPERBLOCKS=2, num_warps=4)


def supports(qtype: int, k: int) -> bool:
    return packed_gemv.supports(qtype, k)


def dequantize(blocks: torch.Tensor, qtype: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """blocks uint8 [N, row bytes] (rows of K values; contiguous rows, any row stride) -> [N, K] in `dtype`:
    gguf's dequantization in float32, rounded once to `dtype`."""
    if not (blocks.is_cuda and triton is not None and supports(qtype, k)):
        return dequantize_ref(blocks, qtype, k).to(dtype)
    return dequantize_blocks(blocks, qtype, k, dtype)


def dequantize_blocks(blocks: torch.Tensor, qtype: int, k: int, dtype: torch.dtype,
                      ids: torch.Tensor | None = None) -> torch.Tensor:
    """dequantize's one launch, for a type it `supports` (CUDA tensors; CPU ones under TRITON_INTERPRET=1); with
    `ids` [N] (on the output's device) the rows blocks[ids], read where they lie."""
    num_rows = blocks.shape[0] if ids is None else ids.shape[0]
    assert blocks.dtype == torch.uint8 and blocks.stride(1) == 1
    device = blocks.device if ids is None else ids.device
    out = torch.empty(num_rows, k, dtype=dtype, device=device)
    superblocks = packed_gemv.chunks_per_step(CONFIG["SUPERBLOCKS"], k)
    grid = (triton.cdiv(num_rows, CONFIG["BLOCK_N"]), packed_gemv.num_chunks(k) // superblocks)
    _dequantize_kernel[grid](blocks, packed_iquants.table_for(qtype, out), out, ids if ids is not None else out,
                             num_rows, k, blocks.stride(0), QTYPE=qtype, BLOCK_N=CONFIG["BLOCK_N"], SB=superblocks,
                             HAS_IDS=ids is not None, num_warps=CONFIG["num_warps"])
    return out


def dequantize_rows(blocks: torch.Tensor, ids: torch.Tensor, qtype: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """blocks uint8 [R, row bytes] (on the device, or in page-locked host memory that the kernel reads over PCIe,
    as a lookup table kept in host memory is), ids [N] int64 -> [N, K] in `dtype` on the ids' device: dequantize
    of blocks[ids] without gathering the blocks on the host. One launch on CUDA for the types `supports` takes; a
    dense type's rows (F32 / F16 / BF16) are gathered by the SMs, then widened."""
    on_device = ids.is_cuda or packed_q8.interpreted()
    if on_device and triton is not None and supports(qtype, k):
        return dequantize_blocks(blocks, qtype, k, dtype, ids)
    if on_device and triton is not None and blocks.shape[1] % 4 == 0 and blocks.data_ptr() % 4 == 0:
        found = torch.empty(ids.shape[0], blocks.shape[1], dtype=torch.uint8, device=ids.device)
        sm_copy.gather_rows(found, blocks, ids)                                               # [N, row bytes]
        return dequantize_ref(found, qtype, k).to(dtype)
    return dequantize_ref(blocks.index_select(0, ids.to(blocks.device)), qtype, k).to(dtype).to(ids.device)


if triton is not None:

    @triton.jit
    def _dequantize_kernel(w_ptr, table_ptr, out_ptr, ids_ptr, num_rows, k, row_stride, QTYPE: tl.constexpr,
                           BLOCK_N: tl.constexpr, SB: tl.constexpr, HAS_IDS: tl.constexpr):
        # program (n, s): output rows n * BLOCK_N.. (blocks rows ids[them] with HAS_IDS), superblocks s * SB..
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        sb = tl.program_id(1) * SB
        n_ok = (offs_n < num_rows)[:, None, None, None]                                     # [BN, 1, 1, 1]
        out_rows = offs_n.to(tl.int64)[:, None, None, None]
        if HAS_IDS:
            rows = tl.load(ids_ptr + offs_n, mask=offs_n < num_rows, other=0).to(tl.int64)[:, None, None, None]
        else:
            rows = out_rows
        r = tl.arange(0, 8)[None, None, :, None]
        l = tl.arange(0, 32)[None, None, None, :]
        ok = _chunk_ok(n_ok, sb, r, k, QTYPE, SB)                                          # [BN, SB, 8, 1]
        values = _chunk_values(w_ptr + rows * row_stride, sb, r, l, ok, table_ptr, QTYPE, SB,
                               BLOCK_N)                                                     # [BN, SB, 8, 32]
        columns = (sb + tl.arange(0, SB))[None, :, None, None] * 256 + r * 32 + l
        tl.store(out_ptr + out_rows * k + columns, values.to(out_ptr.dtype.element_ty), mask=ok)
