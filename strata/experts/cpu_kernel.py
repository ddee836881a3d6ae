"""The native CPU expert kernel (cpu_moe.c): built with the system C compiler at first use, loaded
with ctypes, and called with the GIL released. One call computes a layer's CPU pairs on a pool of
threads that reads each distinct expert once; torch's per-expert path is the fallback when no
compiler is found or the build fails (the reason is logged once).

Built for this machine (-march=native) into ~/.cache/strata (or $STRATA_CACHE_DIR), keyed by the
source, the flags and the CPU model, so a copied cache never runs on a CPU it was not built for.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path

import numpy as np
import torch

from strata.kernels.native_build import build_library

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("cpu_moe.c")
_FLAGS = ["-O3", "-march=native", "-pthread"]
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failed: str | None = None


def _build() -> ctypes.CDLL:
    target = build_library("cpu_moe", [(_SOURCE, _FLAGS)], ["-pthread", "-lm"], for_this_cpu=True)
    library = ctypes.CDLL(str(target))
    library.strata_cpu_moe_threads.argtypes = [ctypes.c_int]
    library.strata_cpu_moe_threads.restype = ctypes.c_int
    pointer, i64 = ctypes.c_void_p, ctypes.c_int64
    library.strata_cpu_moe.argtypes = [ctypes.c_int, pointer, i64, i64, pointer, pointer, i64, pointer, pointer,
                                       pointer, pointer]
    library.strata_cpu_moe.restype = ctypes.c_int
    return library


def load() -> ctypes.CDLL | None:
    """The built library, or None (with the reason logged once) when it cannot be built here."""
    global _library, _failed
    with _lock:
        if _library is None and _failed is None:
            try:
                _library = _build()
            except Exception as e:  # no compiler, sandboxed FS...: the torch path still works
                _failed = str(e)
                logger.warning("native CPU expert kernel unavailable (%s); using the torch path", e)
        return _library


def supports(weights: torch.Tensor) -> bool:
    return weights.dtype in _DTYPES and weights.is_contiguous() and weights.device.type == "cpu"


class NativeExperts:
    """Computes one layer's CPU pairs in one call on `num_threads` threads (the caller included)."""

    def __init__(self, library: ctypes.CDLL, num_threads: int) -> None:
        self.library = library
        self.num_threads = library.strata_cpu_moe_threads(num_threads)

    def accumulate(self, hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
                   w13: torch.Tensor, w2: torch.Tensor, out: torch.Tensor) -> None:
        """out [R, D] float32 += per pair (rows [P] into hidden and out, experts [P], weights [P]) the
        weighted expert output; hidden [R, D] in the weights' dtype, w13 [E, 2I, D], w2 [E, D, I].
        The kernel groups the pairs by expert itself: this wrapper only passes pointers."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        experts = np.ascontiguousarray(experts, dtype=np.int64)
        weights = np.ascontiguousarray(weights, dtype=np.float32)
        hidden = hidden.contiguous()
        if hidden.dtype != w13.dtype or out.dtype != torch.float32 or not out.is_contiguous():
            raise ValueError("native experts: hidden must match the weights' dtype and out be contiguous float32")
        status = self.library.strata_cpu_moe(
            _DTYPES[w13.dtype], hidden.data_ptr(), hidden.shape[1], w2.shape[-1], w13.data_ptr(), w2.data_ptr(),
            len(rows), rows.ctypes.data, experts.ctypes.data, weights.ctypes.data, out.data_ptr())
        if status != 0:
            raise MemoryError("native CPU expert kernel: no scratch memory")
