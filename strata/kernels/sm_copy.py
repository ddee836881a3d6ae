"""Copies between pinned host memory and the device made by the SMs' own loads and stores, not by a copy engine.

A copy engine runs its copies in order, whatever their streams. While the KV staging ring
(runner/kv_staging.py) copies ~100 MB of host KV a layer, an offloaded MoE layer's small transfers (its
routing and rows down, the CPU experts' sum up) made by cudaMemcpy wait for about the whole of it
(bench/results/2026-12-03-h200-session27/: a step-like stream 3.7 -> 5.5 ms beside one 112 MB copy; with its
transfers made by kernels, 3.9 -> 4.1 ms). A kernel reads and writes pinned memory over PCIe directly (CUDA's
unified addressing; Triton takes such pointers), so it starts as soon as its stream reaches it.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: callers copy with torch
    triton = tl = None

BLOCK_WORDS = 1024  # 32-bit words a program moves


def flat_words(t: torch.Tensor) -> torch.Tensor | None:
    """A contiguous tensor's bytes as flat 32-bit words, or None when they are not whole aligned words."""
    if not t.is_contiguous() or (t.numel() * t.element_size()) % 4 or t.data_ptr() % 4:
        return None
    return t.view(torch.uint8).reshape(-1).view(torch.int32)


if triton is not None:
    @triton.jit
    def _copy_words_kernel(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)

    @triton.jit
    def _export_rows_kernel(ids_src, ids_dst, weights_src, weights_dst, slots_src, slots_dst, rows_src, rows_dst,
                            top_k, dim, stride_ids, stride_weights, stride_slots, stride_rows, K_PAD: tl.constexpr,
                            BLOCK_D: tl.constexpr):
        # program t: token row t's routing (k ids, weights, slots) and its hidden row, each cast to its buffer's dtype
        t = tl.program_id(0).to(tl.int64)
        k = tl.arange(0, K_PAD)
        k_ok = k < top_k
        tl.store(ids_dst + t * top_k + k, tl.load(ids_src + t * stride_ids + k, mask=k_ok), mask=k_ok)
        tl.store(weights_dst + t * top_k + k, tl.load(weights_src + t * stride_weights + k, mask=k_ok), mask=k_ok)
        tl.store(slots_dst + t * top_k + k, tl.load(slots_src + t * stride_slots + k, mask=k_ok), mask=k_ok)
        for d0 in range(0, dim, BLOCK_D):
            d = d0 + tl.arange(0, BLOCK_D)
            d_ok = d < dim
            tl.store(rows_dst + t * dim + d, tl.load(rows_src + t * stride_rows + d, mask=d_ok), mask=d_ok)

    @triton.jit
    def _gather_rows_kernel(src, dst, ids, row_words, src_stride, dst_stride, BLOCK: tl.constexpr):
        # program (slot, chunk): BLOCK words of row ids[slot] of src into row `slot` of dst (a negative id: none)
        slot, chunk = tl.program_id(0), tl.program_id(1)
        row = tl.load(ids + slot)
        offsets = chunk * BLOCK + tl.arange(0, BLOCK)
        # one comparison (Triton 3.9's interpreter refuses the mask `(offsets < row_words) & (row >= 0)`)
        mask = offsets < tl.where(row >= 0, row_words, 0)
        words = tl.load(src + row.to(tl.int64) * src_stride + offsets, mask=mask)
        tl.store(dst + slot.to(tl.int64) * dst_stride + offsets, words, mask=mask)


def copy_words(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst = src (same bytes; each contiguous, whole 32-bit words, on CUDA or in pinned host memory, one of them
    on CUDA) by a kernel on the current stream (graph-capturable)."""
    d, s = flat_words(dst), flat_words(src)
    if (d is None or s is None or d.numel() != s.numel() or not (dst.is_cuda or src.is_cuda)
            or not all(t.is_cuda or t.is_pinned() for t in (dst, src))):
        raise ValueError(f"copy_words: contiguous tensors of the same whole-word size, each on CUDA or pinned, got "
                         f"{dst.dtype} {tuple(dst.shape)} on {dst.device} (pinned={dst.is_pinned()}) <- {src.dtype} "
                         f"{tuple(src.shape)} on {src.device} (pinned={src.is_pinned()})")
    n = d.numel()
    if n:
        _copy_words_kernel[(triton.cdiv(n, BLOCK_WORDS),)](s, d, n, BLOCK=BLOCK_WORDS, num_warps=4)


def export_rows(dst: tuple[torch.Tensor, ...], src: tuple[torch.Tensor, ...]) -> None:
    """An offloaded MoE layer's routing and rows to the host in one launch: dst = (ids, weights, slots) [T, K] and
    rows [T, D], contiguous (pinned host buffers on CUDA), from src alike (on the device; rows of unit stride along
    their last dim), each value cast to its dst's dtype. Four copy nodes of a captured graph (several us each, in
    order) become one kernel. Elsewhere (no Triton, a CPU tensor outside Triton's interpreter) by torch copies."""
    if len(dst) != 4 or len(src) != 4 or any(d.shape != s.shape or d.dim() != 2 for d, s in zip(dst, src)) \
            or dst[0].shape != dst[1].shape or dst[0].shape != dst[2].shape or dst[0].shape[0] != dst[3].shape[0] \
            or not all(d.is_contiguous() for d in dst) or not all(s.stride(1) == 1 for s in src):
        raise ValueError("export_rows: (ids, weights, slots) [T, K] and rows [T, D] alike in dst and src, dst "
                         "contiguous, src of unit stride along each row, got dst "
                         f"{[tuple(d.shape) for d in dst]} and src {[tuple(s.shape) for s in src]}")
    num_rows, top_k = dst[0].shape
    if not num_rows:
        return
    if triton is None or not (src[0].is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        for d, s in zip(dst, src):
            d.copy_(s)
        return
    dim = dst[3].shape[1]
    _export_rows_kernel[(num_rows,)](src[0], dst[0], src[1], dst[1], src[2], dst[2], src[3], dst[3], top_k, dim,
                                     src[0].stride(0), src[1].stride(0), src[2].stride(0), src[3].stride(0),
                                     K_PAD=triton.next_power_of_2(top_k),
                                     BLOCK_D=min(2048, triton.next_power_of_2(dim)), num_warps=4)


GATHER_BLOCK_WORDS = 2048  # 8 KB a program: a 3 MB expert is ~370 programs, all the SMs busy on its reads


def gather_rows(dst: torch.Tensor, src: torch.Tensor, ids: torch.Tensor) -> None:
    """dst[s] = src[ids[s]] for each s with ids[s] >= 0 (dst[s] left alone where it is negative). On CUDA by a
    kernel on the current stream that reads `ids` on the device (graph-capturable, no host sync), src (e.g. the
    experts' packed bytes in pinned host memory) read over PCIe by the SMs; elsewhere by torch indexing (Triton's
    interpreter runs the kernel when TRITON_INTERPRET=1). src [E, ...] and dst [S, ...]: rows alike, each row
    contiguous whole 32-bit words (rows may lie further apart, as device slots sized for the largest experts do);
    ids [S] int64 on dst's device."""
    row_bytes = src[0].numel() * src.element_size() if src.shape[0] else 0
    aligned = all(t.data_ptr() % 4 == 0 and (t.stride(0) * t.element_size()) % 4 == 0 for t in (src, dst))
    if (dst.shape[1:] != src.shape[1:] or dst.dtype != src.dtype or ids.shape != (dst.shape[0],) or row_bytes % 4
            or not aligned or not all(t[0].is_contiguous() for t in (src, dst) if t.shape[0])):
        raise ValueError(f"gather_rows: dst [S, ...] and src [E, ...] with alike contiguous rows of whole 32-bit words "
                         f"and ids [S], got dst {dst.dtype} {tuple(dst.shape)}, src {src.dtype} {tuple(src.shape)}, "
                         f"ids {tuple(ids.shape)}")
    if not dst.shape[0] or not row_bytes:
        return
    if triton is None or not (dst.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        chosen = ids >= 0
        dst[chosen] = src[ids[chosen].to(src.device)].to(dst.device)
        return
    grid = (dst.shape[0], triton.cdiv(row_bytes // 4, GATHER_BLOCK_WORDS))
    _gather_rows_kernel[grid](_base_words(src), _base_words(dst), ids, row_bytes // 4,
                              src.stride(0) * src.element_size() // 4, dst.stride(0) * dst.element_size() // 4,
                              BLOCK=GATHER_BLOCK_WORDS, num_warps=8)


def _base_words(t: torch.Tensor) -> torch.Tensor:
    """A flat int32 view from t's first byte over all its rows, as the kernel addresses them (rows stride(0) apart)."""
    span = ((t.shape[0] - 1) * t.stride(0) + t[0].numel()) * t.element_size()
    return torch.as_strided(t.view(torch.uint8), (span,), (1,)).view(torch.int32)
