"""Device copies of small pinned host buffers made by a kernel's own loads, not by a copy engine.

A host-to-device cudaMemcpy queues behind every copy the engine already holds, whatever its stream: while
--kv-staging-layers streams ~100 MB of host KV into its ring, the few kilobytes an offloaded MoE layer uploads
(the CPU experts' sum) waited for all of it (tools/gpu_ab/copy_hol.py: 3.6 -> 5.4 ms on a step-like stream, with
the large copy in chunks or not). The SMs read pinned memory over PCIe directly (CUDA's unified addressing;
Triton takes such pointers), so this copy starts as soon as its stream reaches it.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: callers copy with torch
    triton = tl = None

BLOCK = 1024

if triton is not None:
    @triton.jit
    def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


def copy_from_host(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst (contiguous, CUDA) = src (contiguous, pinned host, same dtype and number of elements), read by the
    SMs on dst's current stream."""
    if not (src.is_pinned() and dst.is_cuda and src.is_contiguous() and dst.is_contiguous()
            and src.dtype == dst.dtype and src.numel() == dst.numel()):
        raise ValueError(f"copy_from_host: a contiguous pinned {src.dtype} source into a contiguous CUDA tensor of "
                         f"the same size, got {src.dtype} {tuple(src.shape)} pinned={src.is_pinned()} -> "
                         f"{dst.dtype} {tuple(dst.shape)} on {dst.device}")
    n = src.numel()
    if n:
        _copy_kernel[(triton.cdiv(n, BLOCK),)](src, dst, n, BLOCK=BLOCK)
