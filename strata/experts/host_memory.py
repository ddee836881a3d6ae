"""Host memory for offloaded experts: backed by 2 MiB pages where the kernel allows (transparent huge
pages on request), and pinned for the device's DMA by registering it with CUDA.

The CPU expert pool streams these weights at memory speed. With 4 KiB pages a model's experts
(~30 GB for 24 layers of Qwen3-30B-A3B) need page-table walks that miss the caches, and the hardware
prefetchers stop at every page boundary: on the H200 host one 8-expert call took 0.84 ms on torch's
pinned memory and 0.75 ms on huge pages (.devscripts/hugepage_bench.py, bench/results/2026-11-29-h200-session4).
Without THP, or when registering fails, it falls back to plain (then pinned) memory.
"""

from __future__ import annotations

import mmap

import torch

from strata.transfer import pin_in_place


def host_copy(weights: torch.Tensor, pin: bool) -> torch.Tensor:
    """A host copy of `weights` (any device) in huge-page-backed memory, pinned when `pin`."""
    weights = weights.detach()
    nbytes = weights.numel() * weights.element_size()
    if nbytes == 0:
        return weights.to("cpu", copy=True)
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buffer.madvise(mmap.MADV_HUGEPAGE)  # before the first touch, which allocates the pages
    except (AttributeError, OSError):  # no THP here: 4 KiB pages still work
        pass
    host = torch.frombuffer(buffer, dtype=weights.dtype, count=weights.numel()).view(weights.shape)
    host.copy_(weights)
    # page-locked for asynchronous copies, unlocked when the tensor is collected (before its memory is unmapped)
    if pin and not pin_in_place(host, "expert weights (they use torch's pinned memory)"):
        return host.pin_memory()
    return host
