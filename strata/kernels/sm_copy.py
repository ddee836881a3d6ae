"""Copies between pinned host memory and the device made by the SMs' own loads and stores, not by a copy engine.

A copy engine runs its copies in order, whatever their streams. While the KV staging ring
(runner/kv_staging.py) copies ~100 MB of host KV a layer, an offloaded MoE layer's small transfers (its
routing and rows down, the CPU experts' sum up) made by cudaMemcpy wait for about the whole of it
(bench/results/2026-12-03-h200-session27/: a step-like stream 3.7 -> 5.5 ms beside one 112 MB copy; with its
transfers made by kernels, 3.9 -> 4.1 ms). A kernel reads and writes pinned memory over PCIe directly (CUDA's
unified addressing; Triton takes such pointers), so it starts as soon as its stream reaches it.
"""

from __future__ import annotations

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
