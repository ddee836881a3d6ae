"""Copies between pinned host memory and the device made by the SMs' own loads and stores, not by a copy engine.

The KV staging ring (runner/kv_staging.py) copies ~100 MB of host KV a layer at 128K tokens of context. Made by
cudaMemcpyAsync, those copies hold back the small copies an offloaded MoE layer makes on the main stream (its
routing rows down, the CPU experts' sum up) for about their whole length, in pieces or not
(bench/results/2026-12-02-h200-session21/: a step-like stream 3.6 -> 5.4 ms beside one 112 MB copy). A kernel
reading pinned memory over PCIe (CUDA's unified addressing; Triton takes such pointers) leaves the copy
engines to the main stream; a few programs keep enough loads in flight to fill the link. The other way
round, the main stream's small transfers made by kernels (`copy_words`) do not queue behind the ring's
copies in the engines either.

`gather_rows` moves rows by index (`gather_rows_ref` states it: dst[i] = src[rows[i]] for i < n); `copy_words`
moves a contiguous tensor's bytes.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: callers copy with torch
    triton = tl = None

ROWS = 4  # rows a program moves per iteration
BLOCK_WORDS = 1024  # 32-bit words of a row per load


def gather_rows_ref(dst: torch.Tensor, src: torch.Tensor, rows: torch.Tensor, n: int) -> None:
    """dst[:n] = src[rows[:n]] (dst [R, ...], src [N, ...], rows int32/int64 [>= n])."""
    dst[:n] = src[rows[:n].long().to(src.device)].to(dst.device)


def flat_words(t: torch.Tensor) -> torch.Tensor | None:
    """A contiguous tensor's bytes as flat 32-bit words, or None when they are not whole aligned words."""
    if not t.is_contiguous() or (t.numel() * t.element_size()) % 4 or t.data_ptr() % 4:
        return None
    return t.view(torch.uint8).reshape(-1).view(torch.int32)


def words(t: torch.Tensor) -> torch.Tensor | None:
    """A contiguous [N, ...] tensor as [N, W] 32-bit words, or None when its rows are not whole words."""
    if not t.is_contiguous() or t.dim() == 0 or t.shape[0] == 0:
        return None
    row_bytes = t[0].numel() * t.element_size()
    if row_bytes % 4 or t.data_ptr() % 4:
        return None
    return t.view(torch.uint8).reshape(t.shape[0], row_bytes).view(torch.int32)


if triton is not None:
    @triton.jit
    def _gather_kernel(src, dst, rows, n, W, ROWS: tl.constexpr, BLOCK_W: tl.constexpr):
        # persistent: program p moves rows p*ROWS.., then (p + P)*ROWS.., ...
        step = tl.num_programs(0) * ROWS
        for first in range(tl.program_id(0) * ROWS, n, step):
            r = first + tl.arange(0, ROWS)
            live = r < n
            source = tl.load(rows + r, mask=live, other=0).to(tl.int64)  # [ROWS] host rows
            for w0 in range(0, W, BLOCK_W):
                w = w0 + tl.arange(0, BLOCK_W)
                mask = live[:, None] & (w[None, :] < W)
                values = tl.load(src + source[:, None] * W + w[None, :], mask=mask)  # [ROWS, BLOCK_W]
                tl.store(dst + r.to(tl.int64)[:, None] * W + w[None, :], values, mask=mask)

    @triton.jit
    def _copy_words_kernel(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


def gather_rows(dst: torch.Tensor, src: torch.Tensor, rows: torch.Tensor, n: int, programs: int) -> None:
    """dst[:n] = src[rows[:n]] by `programs` persistent programs on the current stream.

    dst: [R, W] int32 on CUDA; src: [N, W] int32, pinned host memory (or CUDA); rows: int32 [>= n], pinned
    host memory or CUDA (read by the kernel: the caller keeps it unchanged until the kernel has run)."""
    if not (dst.is_cuda and dst.dtype == src.dtype == torch.int32 and rows.dtype == torch.int32
            and dst.dim() == src.dim() == 2 and dst.shape[1] == src.shape[1] and dst.is_contiguous()
            and src.is_contiguous() and (src.is_cuda or src.is_pinned()) and (rows.is_cuda or rows.is_pinned())
            and 0 <= n <= min(dst.shape[0], rows.numel())):
        raise ValueError(f"gather_rows: int32 [R, W] CUDA rows from int32 [N, W] pinned or CUDA rows by int32 "
                         f"indices, got dst {dst.dtype} {tuple(dst.shape)} on {dst.device}, src {src.dtype} "
                         f"{tuple(src.shape)} pinned={src.is_pinned()}, rows {rows.dtype} {rows.numel()}, n={n}")
    if n == 0:
        return
    width = src.shape[1]
    block = min(BLOCK_WORDS, triton.next_power_of_2(width))
    grid = (max(1, min(programs, triton.cdiv(n, ROWS))),)
    _gather_kernel[grid](src, dst, rows, n, width, ROWS=ROWS, BLOCK_W=block, num_warps=4)


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
