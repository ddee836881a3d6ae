"""kernels/state_rollback.py: a verification window's recurrent state rolled back to its last accepted token, only
for the slots that rejected a draft, on the CPU (the reference) and on CUDA (the kernel, inside a CUDA graph too)."""

from __future__ import annotations

import pytest
import torch

from strata.kernels.state_rollback import restore_accepted_rows, restore_accepted_rows_ref

gpu = pytest.mark.gpu


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
