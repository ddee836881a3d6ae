"""Byte copies to the device queued with one CUDA runtime call each, for copies on a step's critical path.

An offloaded layer's host part queues its PCIe staging copies (two an expert) while the step waits for it:
torch's `copy_` on views costs the host ~20 us a copy (views, dispatch, pinned-memory checks), which ate what
the staging saved (session 41: 122 us a layer for 3 experts). A raw cudaMemcpyAsync from ctypes costs a few.
The runtime is the one torch itself loaded (found among this process's mapped files, so the same library and
context); where none is mapped (CPU-only torch, a static build) `runtime()` is None and callers use `copy_`.
"""

from __future__ import annotations

import ctypes
import functools

_HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice


@functools.cache
def runtime() -> ctypes.CDLL | None:
    """The CUDA runtime library torch loaded, set up for cudaMemcpyAsync, or None. Call after CUDA is in use."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "/libcudart.so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            library = ctypes.CDLL(path)
            copy = library.cudaMemcpyAsync
        except (OSError, AttributeError):
            continue
        copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        copy.restype = ctypes.c_int
        return library
    return None


def copy_to_device(library: ctypes.CDLL, dst: int, src: int, nbytes: int, stream: int) -> None:
    """Queue a copy of `nbytes` from host address `src` to device address `dst` on `stream` (a cudaStream_t
    handle: torch's Stream.cuda_stream). Asynchronous when the host memory is pinned or registered."""
    error = library.cudaMemcpyAsync(dst, src, nbytes, _HOST_TO_DEVICE, stream)
    if error:
        raise RuntimeError(f"cudaMemcpyAsync of {nbytes} bytes failed: CUDA error {error}")
