"""Programmatic dependent launch (PDL, Hopper and later) for the Triton kernels of a step.

A kernel launched with PDL may be scheduled while the kernel before it in the stream is finishing. Its
first act is `wait_for_previous_kernel`: griddepcontrol.wait blocks until the previous kernel has
completed and its writes are visible (so nothing is read or written early), then
griddepcontrol.launch_dependents lets the next kernel be scheduled in turn. What it saves is the gap
between dependent launches, a few hundred ns per kernel boundary, which adds up over the ~10 small
kernels of each layer of a decode step. Kernels launched without it are unaffected, and a kernel that
waits without having been launched with PDL waits for nothing. STRATA_NO_PDL=1 turns it off.

`arrival_counters` keeps the zeroed int32 counters of kernels whose last program to arrive at a group (an atomic
count) finishes the group's work in the same launch, instead of a launch of its own after it.
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


_ARRIVALS: dict[tuple[str, torch.device], torch.Tensor] = {}
_RETIRED: list[torch.Tensor] = []  # outgrown buffers: CUDA graphs captured with them still read them


def arrival_counters(key: str, device: torch.device, needed: int, minimum: int = 4096) -> torch.Tensor | None:
    """int32 zeros [>= needed] on `device` for one kind of kernel (`key`), kept for the process: each launch leaves
    them at zero (the last arrival of a group resets its counter), so every launch and every CUDA graph of that kind
    reads the same buffer. Grown, never shrunk; the buffers it outgrows are kept, as graphs may still point at them.
    None where it would have to grow during a graph capture (the caller then takes its path without counters).
    Launches of one key must not run concurrently (one stream: they do not)."""
    counters = _ARRIVALS.get((key, device))
    if counters is None or counters.numel() < needed:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        if counters is not None:
            _RETIRED.append(counters)
        counters = _ARRIVALS[(key, device)] = torch.zeros(max(needed, minimum), dtype=torch.int32, device=device)
    return counters


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
