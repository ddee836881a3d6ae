"""CUDA graphs split at host points.

Some layers need the host in the middle of a step: a MoE layer with offloaded experts reads its
routing, computes the missed experts on the CPU and uploads the result. Such a step is captured as a
chain of graphs: a layer that needs the host calls `split_here(host_fn)` while the step is being
captured, which ends the current graph and begins the next one; at replay the host functions run
between the graphs, in capture order (`SplitGraph.replay`). Everything else of the step (attention,
norms, routing, the resident experts) stays inside graphs, so the host works once per such layer
instead of launching every kernel of the step.

A host function gets the number of real (unpadded) token rows of the replayed step and may only read
and write buffers whose addresses the graphs captured (pinned host buffers filled by captured copies,
device buffers read by the next graph), on the current stream.

A split may be gated (`split_here(host_fn, flag)`, a strata.kernels.host_flag.HostFlag): the next graph then begins
by waiting on the flag, and a replay launches it before the host function, which the flag's raise ends (also when
it fails). The launch so overlaps the device's work before the host function instead of following it. Such a host
function must not wait for the stream (the next graph is queued on it, waiting for the host): only for events
recorded before the split, and it must queue nothing on the stream.

A base module (it imports nothing from strata): the runner captures with it, expert providers split with it.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
from collections.abc import Callable

import torch

HostFn = Callable[[int], None]

_ACTIVE: contextvars.ContextVar[SplitCapture | None] = contextvars.ContextVar("split_capture", default=None)


@contextlib.contextmanager
def collector_held():
    """Python's garbage collector held off while a graph is captured. A CUDA graph the collector frees mid-capture
    (one of a dropped engine, held in a reference cycle) destroys its executable there, which CUDA forbids while a
    stream captures: the capture is invalidated and its memory pool left recording. torch (>= 2.9) no longer
    collects before a capture; neither do we (a full collection costs tens of ms, more than a small capture): the
    garbage waits for the next collection after the capture."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class SplitGraph:
    """A step captured as graphs with host functions between them (one graph when nothing split)."""

    def __init__(self) -> None:
        self.graphs: list[torch.cuda.CUDAGraph] = []
        self.host_fns: list[HostFn] = []  # host_fns[i] runs after graphs[i]
        self.flags: list = []  # flags[i]: the HostFlag graphs[i + 1] waits on (None: launched after host_fns[i])

    @property
    def num_splits(self) -> int:
        return len(self.host_fns)

    def replay(self, num_real_rows: int) -> None:
        self.graphs[0].replay()
        for host_fn, flag, graph in zip(self.host_fns, self.flags, self.graphs[1:]):
            if flag is None:
                host_fn(num_real_rows)
                graph.replay()
                continue
            graph.replay()  # queued behind the flag
            try:
                host_fn(num_real_rows)
            finally:  # (a failed host part still lets the device go on: nothing may wait on it for good)
                flag.raise_()

    def reset(self) -> None:
        for graph in self.graphs:
            graph.reset()


class SplitCapture:
    """Records a SplitGraph: `with SplitCapture(pool) as capture:` run the forward (on a side stream,
    as torch.cuda.graph does); layers call `split_here`."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.result = SplitGraph()
        self.stream = torch.cuda.Stream()
        self._stream_ctx = None
        self._token = None
        self._collector = collector_held()

    def __enter__(self) -> SplitCapture:
        self._collector.__enter__()
        torch.cuda.synchronize()
        self.stream.wait_stream(torch.cuda.current_stream())
        self._stream_ctx = torch.cuda.stream(self.stream)
        self._stream_ctx.__enter__()
        try:
            self._begin()
        except BaseException:
            self._stream_ctx.__exit__(None, None, None)
            self._collector.__exit__(None, None, None)
            raise
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _ACTIVE.reset(self._token)
        try:
            self.result.graphs[-1].capture_end()
        finally:
            self._stream_ctx.__exit__(exc_type, exc, tb)
            torch.cuda.current_stream().wait_stream(self.stream)
            self._collector.__exit__(None, None, None)

    def _begin(self) -> None:
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(pool=self.pool)
        self.result.graphs.append(graph)

    def split(self, host_fn: HostFn, flag=None) -> None:
        self.result.graphs[-1].capture_end()
        self.result.host_fns.append(host_fn)
        self.result.flags.append(flag)
        self._begin()
        if flag is not None:
            flag.wait()


def split_here(host_fn: HostFn, flag=None) -> bool:
    """While a step is being captured: end the current graph here and run `host_fn` at this point of
    every replay (`flag`: a gated split, see the module's docstring); returns False (and does nothing) outside a
    capture."""
    capture = _ACTIVE.get()
    if capture is None:
        return False
    capture.split(host_fn, flag)
    return True


def capturing() -> bool:
    return _ACTIVE.get() is not None

