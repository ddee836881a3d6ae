"""Rows of a table over a file's map read by the host after the file left the page cache (as a PLE table of
Qwen4-Exp kept as GGUF blocks is, where RAM is short): one by one as mapped, with MADV_RANDOM, and with MADV_RANDOM
plus MADV_WILLNEED on the rows' pages first (strata.page_advice); then read_ahead's cost on pages in RAM; then
RowReads (advice only after a slow plain gather), eight gathers evicted and eight in RAM.

    python page_advice_bench.py [FILE] [GIB] [ROWS]   (writes FILE of GIB GiB of random bytes once)
"""

import os
import sys
import time

import numpy as np
import torch

from strata.page_advice import RowReads, random_access, read_ahead

path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/page_advice_table.bin"
gib = int(sys.argv[2]) if len(sys.argv) > 2 else 8
num_rows = int(sys.argv[3]) if len(sys.argv) > 3 else 256
ROW = 90  # IQ4_NL rows of 160 values
size = gib << 30
if not os.path.exists(path) or os.path.getsize(path) != size:
    chunk = os.urandom(1 << 24)
    with open(path, "wb") as f:
        for _ in range(size >> 24):
            f.write(chunk)
    os.sync()
rows = size // ROW
rng = np.random.default_rng(0)


def evict():
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def arm(name, advise_random, advise_rows, cached=False):
    table = torch.from_numpy(np.memmap(path, dtype=np.uint8, mode="r", shape=(rows, ROW)))  # a fresh map each arm
    if advise_random:
        random_access(table)
    times = []
    for _ in range(3):
        ids = torch.from_numpy(rng.integers(0, rows, num_rows))
        if cached:
            table.index_select(0, ids)
        else:
            evict()
        started = time.perf_counter()
        if advise_rows:
            read_ahead(table, ids)
        table.index_select(0, ids)
        times.append((time.perf_counter() - started) * 1e3)
    print(f"{name:<40} {' '.join(f'{t:9.3f}' for t in times)} ms")


print(f"{num_rows} rows of {ROW} bytes from a {gib} GiB file; three tries an arm")
arm("evicted, as mapped", False, False)
arm("evicted, MADV_RANDOM", True, False)
arm("evicted, MADV_RANDOM + read_ahead", True, True)
arm("in RAM, as mapped", False, False, cached=True)
arm("in RAM, MADV_RANDOM + read_ahead", True, True, cached=True)


def row_reads(name, cached):
    reads = RowReads(torch.from_numpy(np.memmap(path, dtype=np.uint8, mode="r", shape=(rows, ROW))))
    times = []
    for _ in range(8):
        ids = torch.from_numpy(rng.integers(0, rows, num_rows))
        if cached:
            reads.table.index_select(0, ids)
        else:
            evict()
        started = time.perf_counter()
        reads.gather(ids)
        times.append((time.perf_counter() - started) * 1e3)
    print(f"{name:<40} {' '.join(f'{t:8.3f}' for t in times)} ms")


row_reads("RowReads, evicted", False)
row_reads("RowReads, in RAM", True)
