"""kernels/state_rollback.py: a verification window's recurrent state rolled back to its last accepted token, only
for the slots that rejected a draft, on the CPU (the reference) and on CUDA (the kernel, inside a CUDA graph too);
every layer's tensors in one launch (restore_all_*), on CUDA or in Triton's interpreter (TRITON_INTERPRET=1)."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from strata.kernels import state_rollback
from strata.kernels.state_rollback import (restore_accepted_rows, restore_accepted_rows_ref, restore_all_accepted,
                                           restore_all_rows, row_words)

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1"
                                 or importlib.util.find_spec("triton") is None, reason="Triton's interpreter: set TRITON_INTERPRET=1 with triton installed")


def _problem(row_shape, dtype, device, num_slots=5, window=4, pool_rows=9, seed=0):
    generator = torch.Generator().manual_seed(seed)
    recorded = torch.randn(num_slots * window, *row_shape, generator=generator).to(dtype).to(device)  # [S * n, ...]
    pool = torch.randn(pool_rows, *row_shape, generator=generator).to(dtype).to(device)               # [S_max, ...]
    slots = torch.tensor([7, 0, 3, 8, 5][:num_slots], device=device)
    accepted = torch.tensor([0, 3, 1, 2, 3][:num_slots], device=device)  # slots 0 and 8 accepted their whole windows
    return recorded, pool, slots, accepted, window


def test_reference_restores_only_the_slots_that_rejected_a_draft():
    recorded, pool, slots, accepted, window = _problem((3, 4), torch.float32, "cpu")
    before = pool.clone()
    restore_accepted_rows_ref(recorded, pool, slots, accepted, window)
    for i, (slot, taken) in enumerate(zip(slots.tolist(), accepted.tolist())):
        expected = before[slot] if taken == window - 1 else recorded[i * window + taken]
        assert torch.equal(pool[slot], expected), (i, slot, taken)
    untouched = [r for r in range(pool.shape[0]) if r not in slots.tolist()]
    assert torch.equal(pool[untouched], before[untouched])


def test_cpu_entry_point_is_the_reference():
    recorded, pool, slots, accepted, window = _problem((2, 3, 5), torch.bfloat16, "cpu")
    expected = pool.clone()
    restore_accepted_rows_ref(recorded, expected, slots, accepted, window)
    restore_accepted_rows(recorded, pool, slots, accepted, window)
    assert torch.equal(pool, expected)


@gpu
@pytest.mark.parametrize("row_shape, dtype", [((32, 128, 128), torch.float32),  # a delta-rule state row
                                              ((8192, 3), torch.bfloat16),      # a conv state row
                                              ((2,), torch.float32),            # a PLE n-gram context row
                                              ((3, 1000), torch.float32)])      # a row not a multiple of the block
def test_kernel_matches_reference(row_shape, dtype):
    recorded, pool, slots, accepted, window = _problem(row_shape, dtype, "cuda", seed=len(row_shape))
    expected = pool.clone()
    restore_accepted_rows_ref(recorded, expected, slots, accepted, window)
    restore_accepted_rows(recorded, pool, slots, accepted, window)
    assert torch.equal(pool, expected)


@gpu
def test_rows_of_another_layout_take_the_gather():
    """Recorded rows in another dtype or not contiguous: the same result, still without a host sync."""
    recorded, pool, slots, accepted, window = _problem((6, 10), torch.float32, "cuda", seed=3)
    expected = pool.clone()
    restore_accepted_rows_ref(recorded, expected, slots, accepted, window)
    wide = torch.zeros(recorded.shape[0], 6, 20, device="cuda")
    wide[:, :, ::2] = recorded                                    # every other column: not contiguous
    restore_accepted_rows(wide[:, :, ::2], pool, slots, accepted, window)
    assert torch.equal(pool, expected)


@gpu
def test_kernel_replays_in_a_cuda_graph_with_new_verdicts():
    recorded, pool, slots, accepted, window = _problem((4, 64), torch.float32, "cuda", seed=4)
    start = pool.clone()
    verdicts = accepted.clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        restore_accepted_rows(recorded, pool, slots, verdicts, window)
    for new in ([3, 3, 0, 1, 2], [1, 0, 3, 3, 0]):
        pool.copy_(start)
        verdicts.copy_(torch.tensor(new))
        graph.replay()
        expected = start.clone()
        restore_accepted_rows_ref(recorded, expected, slots, verdicts, window)
        assert torch.equal(pool, expected), new


# a hybrid model's state tensors: delta-rule states, conv states, a PLE context, a row not a multiple of the block,
# and one the joined kernel cannot take (rows of 7 bf16 values: not whole 4-byte words), copied on its own
_LAYER_ROWS = [((4, 16, 16), torch.float32), ((64, 3), torch.bfloat16), ((2,), torch.float32),
               ((3, 1000), torch.float32), ((7,), torch.bfloat16), ((4, 16, 16), torch.float32)]


def _pairs(device, num_slots=5, window=4, pool_rows=9, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(num_slots * window, *shape, generator=generator).to(dtype).to(device),   # recorded
             torch.randn(pool_rows, *shape, generator=generator).to(dtype).to(device))           # pool
            for shape, dtype in _LAYER_ROWS]


def _check_all_accepted(device, joined):
    pairs = _pairs(device)
    slots = torch.tensor([7, 0, 3, 8, 5], device=device)
    accepted = torch.tensor([0, 3, 1, 2, 3], device=device)
    expected = [pool.clone() for _, pool in pairs]
    for (recorded, _), pool in zip(pairs, expected):
        restore_accepted_rows_ref(recorded, pool, slots, accepted, 4)
    restore_all_accepted(pairs, slots, accepted, 4, joined=joined)
    for i, ((_, pool), want) in enumerate(zip(pairs, expected)):
        assert torch.equal(pool, want), _LAYER_ROWS[i]


def _check_all_rows(device, joined):
    pairs = _pairs(device, seed=1)
    slots, rows = torch.tensor([2, 6, 0, 4], device=device), torch.tensor([17, 3, 9, -1], device=device)  # -1: none
    expected = [pool.clone() for _, pool in pairs]
    for (recorded, _), pool in zip(pairs, expected):
        pool[slots[:3]] = recorded[rows[:3]]
    restore_all_rows(pairs, slots, rows, joined=joined)
    for i, ((_, pool), want) in enumerate(zip(pairs, expected)):
        assert torch.equal(pool, want), _LAYER_ROWS[i]


def test_every_layers_rows_restored_on_the_cpu():
    _check_all_accepted("cpu", joined=False)
    _check_all_rows("cpu", joined=False)


def test_row_words_only_for_rows_the_joined_kernel_can_copy():
    pool = torch.zeros(6, 4, 8)
    assert row_words(torch.zeros(10, 4, 8), pool) == 32
    assert row_words(torch.zeros(10, 32), pool) == 32               # same bytes a row, other shape: a word copy
    assert row_words(torch.zeros(10, 4, 8, dtype=torch.float64), pool) == 0    # another dtype
    assert row_words(torch.zeros(10, 8, 4).transpose(1, 2), pool) == 0          # not contiguous
    assert row_words(torch.zeros(10, 4, 9), pool) == 0                          # rows of another size
    assert row_words(torch.zeros(10, 3, dtype=torch.float16), torch.zeros(6, 3, dtype=torch.float16)) == 0  # 6 bytes
    assert row_words(torch.zeros(0, 4, 8), pool) == 32 and row_words(torch.zeros(10, 4, 8), pool[:0]) == 0


def test_a_joined_kernel_that_cannot_build_leaves_the_copies_per_tensor(monkeypatch, caplog):
    """A Triton that cannot build the joined kernel (its first launch raises): warned once, the rows copied per
    tensor then and after, the kernel not tried again."""
    launches = []

    class Unbuildable:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append(grid)
                raise RuntimeError("no such instruction")
            return launch

    monkeypatch.setattr(state_rollback, "_restore_all_kernel", Unbuildable(), raising=False)
    monkeypatch.setattr(state_rollback, "_joined_builds", None)
    with caplog.at_level("WARNING", logger=state_rollback.__name__):
        _check_all_accepted("cpu", joined=True)
        _check_all_rows("cpu", joined=True)
    assert len(launches) == 1 and state_rollback._joined_builds is False
    assert sum("failed to build" in r.getMessage() for r in caplog.records) == 1


@interpreted
def test_joined_kernel_in_the_interpreter():
    _check_all_accepted("cpu", joined=True)
    _check_all_rows("cpu", joined=True)
    assert state_rollback._joined_builds is True  # the kernel ran, not the per-tensor copies


@gpu
def test_joined_kernel_on_cuda():
    _check_all_accepted("cuda", joined=None)
    _check_all_rows("cuda", joined=None)
    assert state_rollback._joined_builds is True  # the kernel ran, not the per-tensor copies


@gpu
def test_joined_kernel_replays_in_a_cuda_graph_and_its_table_is_kept():
    """The address table made before the capture is what the graph reads: it stays however many other tables come;
    a table first needed inside a capture cannot be copied from the host, so that capture copies per tensor."""
    pairs = _pairs("cuda", seed=2)
    slots = torch.tensor([7, 0, 3, 8, 5], device="cuda")
    verdicts = torch.tensor([0, 3, 1, 2, 3], device="cuda")
    starts = [pool.clone() for _, pool in pairs]
    restore_all_accepted(pairs, slots, verdicts, 4)             # eager first, as the verification graphs' tail does
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        restore_all_accepted(pairs, slots, verdicts, 4)
    fresh = _pairs("cuda", seed=3)                                # never seen before the capture: per-tensor copies
    fresh_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(fresh_graph):
        restore_all_accepted(fresh, slots, verdicts, 4)
    for _ in range(2 * state_rollback._MAX_TABLES):              # other tables come and go
        restore_all_accepted(_pairs("cuda", seed=4)[:2], slots, verdicts, 4)
    fresh_starts = [pool.clone() for _, pool in fresh]
    for new in ([3, 3, 0, 1, 2], [1, 0, 3, 3, 0]):
        verdicts.copy_(torch.tensor(new))
        for group, begin, replayed in ((pairs, starts, graph), (fresh, fresh_starts, fresh_graph)):
            for (_, pool), start in zip(group, begin):
                pool.copy_(start)
            replayed.replay()
            for (recorded, pool), start in zip(group, begin):
                expected = start.clone()
                restore_accepted_rows_ref(recorded, expected, slots, verdicts, 4)
                assert torch.equal(pool, expected), new
