"""A flag in pinned host memory that a kernel waits on: a CUDA graph launched before the host work it depends on.

A split graph (strata/split_graphs.py) whose next piece needs what a host part writes (the CPU experts' sum) may
launch that piece first: the piece begins with `wait` (captured), one program spinning on the flag's word over
PCIe until the host part `raise_`s it, then clearing it for the next replay. The piece's launch so overlaps the
device's work before the host part instead of following the host part on the step's critical path.

Ordering: the host writes its results, then the flag (x86 stores reach other agents in program order, and the
pool's workers' stores happened before the caller's: strata/kernels/native/quant_matmul.c); the kernel reads the
flag, and every node after it (the copy of those results) starts after the kernel ends. The kernel clears the
flag before the next replay's host part can raise it: that host part first waits for an event recorded after it.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs without triton
    triton = None


class HostFlag:
    """One int32 word in pinned host memory (a plain host word without CUDA: the interpreter's tests)."""

    def __init__(self) -> None:
        self.word = torch.zeros(1, dtype=torch.int32, pin_memory=torch.cuda.is_available())  # [1]
        self._host = self.word.numpy()

    def wait(self) -> None:
        """Queue (or capture) the kernel that waits until the flag is raised, then clears it."""
        _wait_and_clear[(1,)](self.word, num_warps=1)

    def raise_(self) -> None:
        """The host's side: what the waiting kernel's successors read is written; let them run."""
        self._host[0] = 1

    @property
    def raised(self) -> bool:
        return bool(self._host[0])


if triton is not None:

    @triton.jit
    def _wait_and_clear(flag_ptr):
        while tl.load(flag_ptr, volatile=True) == 0:
            pass
        tl.store(flag_ptr, 0)
