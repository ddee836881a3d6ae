"""Greedy token choice: the argmax of each row of a step's float32 logits in one launch (numpy's on the CPU).

torch's argmax reduces a [N, 150K] row in a launch that took 8 µs on the H200 at one row, after a
stream of PDL launches it cannot join. Here programs own (row, chunk of the vocabulary) and reduce their
chunk to one int64 key: the value's bits made order-preserving above the reversed index, so the larger
key is the larger value, and among equal values the lower index (torch's tie rule; NaN counts as the
largest, as in torch). The last program of a row to finish (an atomic counter the launch leaves at 0)
reduces the row's chunk keys and writes the index.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: argmax_ref still works
    triton = tl = None

from strata.kernels import triton_available
from strata.kernels.launch import arrival_counters, pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel

BLOCK = 4096
# the key of -inf at index 2^31 - 1: below the key of every element of a row
_LOWEST_KEY = ((0xFF800000 - (1 << 32)) ^ 0x7FFFFFFF) << 32


def argmax_ref(logits: torch.Tensor) -> torch.Tensor:
    """logits [N, V] -> the index of each row's largest value [N] int64 (the first one on ties)."""
    return logits.argmax(dim=-1)


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Same contract as argmax_ref; one Triton launch for float32 CUDA rows with unit stride. Contiguous float32
    CPU rows take numpy's argmax (vectorised; the same tie and NaN rules): [4, 151,936] in 59 us against torch's
    767 on the 2-core VM, ~1 % of a 4-stream decode step of a 4-layer Qwen3-Next there."""
    num_rows, vocab = logits.shape
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.is_contiguous() and num_rows:
        return torch.from_numpy(logits.detach().numpy().argmax(axis=-1).astype(np.int64, copy=False))
    if not (logits.is_cuda and logits.dtype == torch.float32 and logits.stride(1) == 1 and num_rows
            and vocab < (1 << 31) and triton_available()):
        return argmax_ref(logits)
    num_chunks = triton.cdiv(vocab, BLOCK)
    counter = arrival_counters("argmax", logits.device, num_rows, minimum=256)
    if counter is None:  # more rows than ever before, inside a graph capture
        return argmax_ref(logits)
    partial = torch.empty(num_rows, num_chunks, dtype=torch.int64, device=logits.device)
    out = torch.empty(num_rows, dtype=torch.int64, device=logits.device)
    _argmax_kernel[(num_rows, num_chunks)](logits, partial, counter, out, vocab, logits.stride(0), num_chunks,
                                           _LOWEST_KEY, BLOCK=BLOCK, C_PAD=triton.next_power_of_2(num_chunks),
                                           num_warps=8, **pdl_options(logits))
    return out


if triton is not None:

    @triton.jit
    def _argmax_kernel(logits_ptr, partial_ptr, counter_ptr, out_ptr, vocab, stride_row, num_chunks, lowest_key,
                       BLOCK: tl.constexpr, C_PAD: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
        offs = chunk * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + row * stride_row + offs, mask=offs < vocab, other=float("-inf"))
        bits = x.to(tl.int32, bitcast=True)
        ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)            # signed order = float order
        # past the vocabulary: -inf at a larger index than any real element, so never chosen over one
        key = (ordered.to(tl.int64) << 32) | (0x7FFFFFFF - offs).to(tl.int64)
        tl.store(partial_ptr + row * num_chunks + chunk, tl.max(key, axis=0))
        tl.debug_barrier()  # the chunk's key stored before the release below
        if tl.atomic_add(counter_ptr + row, 1, sem="acq_rel") == num_chunks - 1:  # the row's last chunk
            c = tl.arange(0, C_PAD)
            keys = tl.load(partial_ptr + row * num_chunks + c, mask=c < num_chunks, other=lowest_key,
                           cache_modifier=".cg")
            tl.store(out_ptr + row, 0x7FFFFFFF - (tl.max(keys, axis=0) & 0xFFFFFFFF))
            tl.atomic_xchg(counter_ptr + row, 0)
