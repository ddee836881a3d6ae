"""Rows of a table over a file's map, read a few at a time at random (Qwen4-Exp's PLE table left as a GGUF file's
blocks, ~29 GB in the real model): advice to the kernel's page cache so that the pages not in RAM come from the
disk together instead of one fault at a time.

- `random_access`: MADV_RANDOM over the table, once. A fault on a map then reads its own page, not the 128 KiB
  around it (the default read-around), which for scattered rows is wasted I/O and page cache.
- `read_ahead`: MADV_WILLNEED on the pages a step's rows span, before they are read. The kernel queues the reads
  of the missing pages at once (the disk serves them in parallel) and the gather then finds them or waits for
  reads already under way; pages in RAM cost one system call a run of pages.

On the development VM's virtual disk, 256 rows of 90 bytes of an 8 GiB file evicted from the page cache
(bench/results/2026-12-07-cpu-session71/): 1.1-1.5 s read one by one as mapped, 14-20 ms with MADV_RANDOM, 2.9-4.8
ms with both. Where the pages are in RAM the advice costs ~0.4-1.2 ms for 256 rows, whose gather takes ~0.15 ms, so
`RowReads` gives it only while the table's reads miss the page cache: it times a plain gather every PROBE_EVERY
gathers (each while no advice is given) and advises the gathers after a slow one.
Linux only: elsewhere (or where madvise fails) the advice does nothing.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import time

import numpy as np
import torch

PAGE = mmap.PAGESIZE


def _load_madvise():
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_WILLNEED"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


_madvise = _load_madvise()


def random_access(table: torch.Tensor) -> bool:
    """MADV_RANDOM over the whole pages `table` (a CPU tensor over a file's map) spans. False where it is not
    available or the kernel refuses it (memory that is not a map: nothing changes)."""
    if _madvise is None or table.numel() == 0:
        return False
    start = table.data_ptr() // PAGE * PAGE
    end = table.data_ptr() + table.numel() * table.element_size()
    return _madvise(start, end - start, mmap.MADV_RANDOM) == 0


# a plain gather slower than this had pages read from the disk (a page in RAM: ~1 us a row; one from a disk: 50+ us)
SLOW_GATHER_BASE_NS = 50_000
SLOW_GATHER_NS_PER_ROW = 5_000
PROBE_EVERY = 32  # advised gathers before the next plain one, timed, says whether advice still pays


class RowReads:
    """The gathers of one table over a file's map [R, row_bytes] by the host, its pages advised while they come
    from the disk: marked for random access at once; a plain gather that is slow turns advice on for the next
    PROBE_EVERY gathers, then a plain one is timed again (and, while no advice is given, every one)."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table
        self.advised_left = 0  # gathers still to advise before the next timed plain one
        random_access(table)

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [N] int64 on the CPU -> the rows table[ids] [N, row_bytes]."""
        if self.advised_left > 0:
            self.advised_left -= 1
            read_ahead(self.table, ids)
            return self.table.index_select(0, ids)
        started = time.perf_counter_ns()
        rows = self.table.index_select(0, ids)
        if time.perf_counter_ns() - started > SLOW_GATHER_BASE_NS + SLOW_GATHER_NS_PER_ROW * ids.numel():
            self.advised_left = PROBE_EVERY
        return rows


def row_page_runs(table: torch.Tensor, ids: torch.Tensor) -> list[tuple[int, int]]:
    """The (first page's address, bytes) runs of consecutive pages the rows `ids` (int64 [N] on the CPU) of
    `table` [R, ...] span, in address order."""
    row_bytes = table.stride(0) * table.element_size()
    width = table[0].numel() * table.element_size() if table.shape[0] else 0
    # (numpy: a few microseconds an operation on a step's few hundred rows, where torch takes ~10)
    starts = table.data_ptr() + ids.to(torch.int64).numpy() * row_bytes               # [N] row addresses
    order = np.argsort(starts)
    first, last = starts[order] // PAGE, (starts[order] + max(width, 1) - 1) // PAGE    # [N] page numbers
    reach = np.maximum.accumulate(last)  # the furthest page the rows up to each one span
    opens = np.ones(first.shape, dtype=bool)  # a row whose first page is past the pages before: a new run
    opens[1:] = first[1:] > reach[:-1] + 1
    closes = np.ones_like(opens)
    closes[:-1] = opens[1:]
    run_first, run_last = first[opens], reach[closes]                                  # [runs]
    return list(zip((run_first * PAGE).tolist(), ((run_last - run_first + 1) * PAGE).tolist()))


def read_ahead(table: torch.Tensor, ids: torch.Tensor) -> int:
    """MADV_WILLNEED on the pages of `table`'s rows `ids` (a CPU tensor over a file's map): reads of the missing
    ones queued at once, before the rows are gathered. The number of runs advised (0 where not available)."""
    if _madvise is None or ids.numel() == 0:
        return 0
    runs = row_page_runs(table, ids)
    for address, nbytes in runs:
        _madvise(address, nbytes, mmap.MADV_WILLNEED)
    return len(runs)
