"""strata.page_advice on a real file's map: the page runs a table's rows span, and the kernel taking the advice."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

from strata import page_advice
from strata.page_advice import PAGE, read_ahead, random_access, row_page_runs

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise advice is Linux's")


@pytest.fixture
def mapped_table(tmp_path):
    """A [rows, 90] uint8 table over a read-only map of a file (rows of IQ4_NL's 160 values), and its bytes."""
    data = np.random.default_rng(0).integers(0, 256, (2000, 90), dtype=np.uint8)
    path = tmp_path / "table.bin"
    data.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r", shape=data.shape)
    yield torch.from_numpy(mapped), data  # (torch warns of a read-only array: nothing here writes to it)
    del mapped


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_row_page_runs_cover_each_row_s_pages_merged_in_address_order(mapped_table):
    table, _ = mapped_table
    base = table.data_ptr()
    assert base % PAGE == 0  # a map starts on a page
    row = 90
    ids = torch.tensor([1000, 46, 0, 1, 45, 1000])
    # rows 0, 1: page 0; row 45 (bytes 4,050-4,139) spans pages 0 and 1; row 46 page 1; row 1000 its own page
    far = 1000 * row // PAGE
    assert row_page_runs(table, ids) == [(base, 2 * PAGE), (base + far * PAGE, PAGE)]
    # rows on pages that follow each other are one run: row 45 on pages 0-1, row 91 (8,190-8,279) on pages 1-2
    assert row_page_runs(table, torch.tensor([91, 45])) == [(base, 3 * PAGE)]
    assert row_page_runs(table, torch.tensor([], dtype=torch.long)) == []


@linux_only
@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_the_kernel_takes_the_advice_on_an_evicted_map_and_the_rows_read_back_unchanged(mapped_table, tmp_path):
    table, data = mapped_table
    fd = os.open(tmp_path / "table.bin", os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache
    finally:
        os.close(fd)
    assert random_access(table)
    ids = torch.tensor([3, 1999, 700, 701])
    assert read_ahead(table, ids) == len(row_page_runs(table, ids)) == 3  # 700 and 701 share a page
    assert torch.equal(table.index_select(0, ids), torch.from_numpy(data[ids.numpy()]))


def test_without_madvise_both_do_nothing(monkeypatch, mapped_table):
    monkeypatch.setattr(page_advice, "_madvise", None)
    table, _ = mapped_table
    assert not random_access(table)
    assert read_ahead(table, torch.tensor([1, 2])) == 0



@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("slow", [False, True])
def test_row_reads_advise_only_after_a_slow_plain_gather_and_probe_again(mapped_table, monkeypatch, slow):
    """RowReads: the map marked for random access at once; gathers return table[ids] either way. Plain gathers are
    timed; after a slow one (here: any, with the threshold below zero) the next PROBE_EVERY gathers are advised,
    then a plain one is timed again. Fast ones (in RAM) are never advised."""
    table, data = mapped_table
    calls = []
    monkeypatch.setattr(page_advice, "random_access", lambda t: calls.append("random"))
    monkeypatch.setattr(page_advice, "read_ahead", lambda t, ids: calls.append("advise"))
    monkeypatch.setattr(page_advice, "SLOW_GATHER_BASE_NS", -10**12 if slow else 10**12)
    monkeypatch.setattr(page_advice, "PROBE_EVERY", 3)
    reads = page_advice.RowReads(table)
    assert calls == ["random"]
    advised = []
    for step in range(9):
        ids = torch.tensor([step, 1999 - step, 700])
        before = len(calls)
        assert torch.equal(reads.gather(ids), torch.from_numpy(data[ids.numpy()]))
        advised.append(len(calls) > before)
    # slow: plain (timed, slow), three advised, plain again, three advised, plain
    assert advised == ([False, True, True, True, False, True, True, True, False] if slow else [False] * 9)
