"""L2 prefetch of weights a later kernel of the step will read, issued by a latency-bound kernel.

A single-stream decode step alternates bandwidth-bound kernels (the projections, the experts) with
latency-bound ones (norms, rotary, attention over a short context, routing) during which HBM sits
idle. A latency-bound kernel can ask L2 for the next projection's weight meanwhile: each thread issues
one `cp.async.bulk.prefetch.L2` (Hopper, fire and forget, nothing waits on it) for its share of the
bytes, so the projection then streams from L2 instead of HBM. The weights do not depend on the
previous kernel, so the prefetch goes out before the PDL wait.
"""

from __future__ import annotations

import functools

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None


@functools.cache
def _bulk_prefetch_supported(device_index: int) -> bool:
    from strata.config import debug_flag

    return not debug_flag("NO_PREFETCH") and torch.cuda.get_device_capability(device_index)[0] >= 9


def prefetch_args(weight: torch.Tensor | None, like: torch.Tensor) -> tuple[torch.Tensor, int, bool]:
    """(pointer, bytes, on) kernel arguments asking L2 for `weight` (contiguous, 16-byte aligned) from a
    launch on `like`'s device; off (a dummy pointer, 0 bytes) without a weight, off Hopper or off CUDA.
    STRATA_NO_PREFETCH=1 turns it off."""
    on = (weight is not None and like.is_cuda and weight.is_contiguous() and weight.data_ptr() % 16 == 0
          and _bulk_prefetch_supported(like.device.index if like.device.index is not None else
                                       torch.cuda.current_device()))
    return (weight, weight.numel() * weight.element_size(), True) if on else (like, 0, False)


if triton is not None:

    @triton.jit
    def prefetch_l2(base_ptr, num_bytes, part, num_parts, THREADS: tl.constexpr):
        """Part `part` of `num_parts` asks L2 for its share of base_ptr's num_bytes (16-aligned): one bulk
        prefetch per thread of the program (THREADS = 32 * num_warps), none past the end."""
        per_thread = tl.cdiv(tl.cdiv(num_bytes, num_parts * THREADS), 16) * 16
        start = (part * THREADS + tl.arange(0, THREADS)).to(tl.int64) * per_thread
        size = tl.minimum(tl.maximum(num_bytes - start, 0), per_thread).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; }\n"
            "mov.u32 $0, 0;",
            "=r,l,r", [base_ptr.to(tl.pointer_type(tl.int8)) + start, size], dtype=tl.int32, is_pure=False,
            pack=1)
