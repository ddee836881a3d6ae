"""Roll a verification window's recurrent state back to its last accepted token, on the device.

A verify pass leaves each slot's pool row at the state after its window's *last* token and records the
state after every token in a [S * n, ...] tensor (window i's rows i * n .. i * n + n - 1). A slot that
accepted all n - 1 drafts already holds its answer in the pool, so only the others are copied: row
i * n + accepted[i] -> pool row slots[i], read straight from the recorded rows (no gathered copy first).
With `accepted` on the device (a CUDA graph's verdicts), which slots copy is decided in the kernel.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: restore_accepted_rows_ref still works
    triton = tl = None

_BLOCK = 4096  # values a program copies


def restore_accepted_rows_ref(recorded: torch.Tensor, pool: torch.Tensor, slots: torch.Tensor,
                              accepted: torch.Tensor, window: int) -> None:
    """recorded [>= S * n, ...], pool [S_max, ...] (rows shaped alike), slots / accepted [S] int64, n = window:
    pool[slots[i]] := recorded[i * n + accepted[i]] for every i with accepted[i] < n - 1."""
    partial = (accepted < window - 1).nonzero().flatten()                                 # [P]
    rows = partial * window + accepted[partial]
    pool.index_copy_(0, slots[partial], recorded[rows].to(pool.dtype))


def restore_accepted_rows(recorded: torch.Tensor, pool: torch.Tensor, slots: torch.Tensor, accepted: torch.Tensor,
                          window: int) -> None:
    """restore_accepted_rows_ref without a host sync on CUDA (one launch, the recorded rows read once, the fully
    accepted slots skipped in the kernel); the reference elsewhere."""
    if not pool.is_cuda:
        restore_accepted_rows_ref(recorded, pool, slots, accepted, window)
        return
    row_numel = pool[0].numel()
    assert recorded[0].numel() == row_numel and recorded.shape[0] >= slots.shape[0] * window
    if recorded.dtype != pool.dtype or not recorded.is_contiguous() or not pool.is_contiguous():
        # rows of another layout: gathered, then every slot written (the fully accepted ones with their own row)
        rows = torch.arange(slots.shape[0], device=slots.device) * window + accepted                # [S]
        keep = (accepted < window - 1).view(-1, *([1] * (pool.dim() - 1)))
        pool.index_copy_(0, slots, torch.where(keep, recorded[rows].to(pool.dtype), pool[slots]))
        return
    grid = (slots.shape[0], triton.cdiv(row_numel, _BLOCK))
    _restore_kernel[grid](recorded, pool, slots, accepted, window, row_numel, BLOCK=_BLOCK)


if triton is not None:

    @triton.jit
    def _restore_kernel(recorded_ptr, pool_ptr, slots_ptr, accepted_ptr, window, row_numel, BLOCK: tl.constexpr):
        i, part = tl.program_id(0), tl.program_id(1)
        accepted = tl.load(accepted_ptr + i)
        if accepted < window - 1:  # a slot that accepted everything holds the window's last state already
            slot = tl.load(slots_ptr + i).to(tl.int64)
            row = (i * window + accepted).to(tl.int64)
            offs = part * BLOCK + tl.arange(0, BLOCK)
            ok = offs < row_numel
            values = tl.load(recorded_ptr + row * row_numel + offs, mask=ok)
            tl.store(pool_ptr + slot * row_numel + offs, values, mask=ok)
