"""Programmatic dependent launch (PDL, Hopper and later) for the Triton kernels of a step.

A kernel launched with PDL may be scheduled while the kernel before it in the stream is finishing. Its
first act is `wait_for_previous_kernel`: griddepcontrol.wait blocks until the previous kernel has
completed and its writes are visible (so nothing is read or written early), then
griddepcontrol.launch_dependents lets the next kernel be scheduled in turn. What it saves is the gap
between dependent launches, a few hundred ns per kernel boundary, which adds up over the ~10 small
kernels of each layer of a decode step. Kernels launched without it are unaffected, and a kernel that
waits without having been launched with PDL waits for nothing. STRATA_NO_PDL=1 turns it off.
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
def _pdl_supported(device_index: int) -> bool:
    from strata.config import debug_flag

    return not debug_flag("NO_PDL") and torch.cuda.get_device_capability(device_index)[0] >= 9


def pdl_options(t: torch.Tensor) -> dict:
    """Launch keywords for a kernel taking the USE_PDL constexpr: PDL on Hopper+ CUDA tensors."""
    on = t.is_cuda and _pdl_supported(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return {"USE_PDL": on, "launch_pdl": on}


if triton is not None:

    @triton.jit
    def wait_for_previous_kernel(USE_PDL: tl.constexpr):
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
