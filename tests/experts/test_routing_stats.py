"""RoutingStats against hand-computed counts: per-expert pair counts, distinct experts touched per
layer and step, steps without routing, placement shares, and that `record` never leaves the device."""

from __future__ import annotations

import pytest
import torch

from strata.experts.stats import CounterMark, RoutingStats


def ids(rows):
    return torch.tensor(rows, dtype=torch.long)  # [T, K]


def test_counts_and_experts_touched_match_a_hand_computation():
    stats = RoutingStats(num_layers=2, num_experts=5, device="cpu")
    # step 1: layer 0 routes tokens to {0, 1} and {1, 2}; layer 1 to {4, 3}, {4, 0}, {4, 3}
    stats.record(0, ids([[0, 1], [1, 2]]))
    stats.record(1, ids([[4, 3], [4, 0], [4, 3]]))
    stats.end_step()
    # step 2: only layer 0 routes (a verify window of one token); layer 1 touches nothing
    stats.record(0, ids([[3, 1]]))
    stats.end_step()
    stats.end_step()  # a step that routed nothing does not count
    snap = stats.snapshot()
    assert snap["counts"] == [[1, 3, 1, 1, 0], [1, 0, 0, 2, 3]]
    assert snap["steps"] == 2
    # distinct experts per (layer, step): (3, 3) then (2, 0) -> 8 over 2 layers x 2 steps
    assert snap["mean_experts_touched_per_layer"] == 8 / 4
    assert "gpu_hit_rate" not in snap  # no provider reported placement


def test_padding_rows_past_real_rows_are_not_counted():
    """CUDA graph layouts pad a step to a fixed row count; the padding's routing must not teach the hot set."""
    stats = RoutingStats(1, 5, "cpu")
    stats.real_rows.fill_(2)
    stats.record(0, ids([[0, 1], [1, 2], [4, 3], [4, 4]]))  # rows 2 and 3 are padding
    stats.end_step()
    assert stats.counts().tolist() == [[1, 2, 1, 0, 0]]
    assert stats.snapshot()["mean_experts_touched_per_layer"] == 3
    stats.real_rows.fill_(0)  # a warm-up on padding only
    stats.record(0, ids([[4, 3]]))
    stats.end_step()
    assert stats.counts().tolist() == [[1, 2, 1, 0, 0]] and stats.snapshot()["steps"] == 1


def test_window_fold_keeps_totals_and_clears_the_window():
    stats = RoutingStats(1, 3, "cpu")
    stats.record(0, ids([[2, 0]]))
    stats.end_window()
    stats.record(0, ids([[2, 1]]))
    assert stats.window_counts.tolist() == [[0, 1, 1]]
    assert stats.counts().tolist() == [[1, 1, 2]]


def test_placement_shares_and_counters():
    stats = RoutingStats(1, 4, "cpu")
    stats.has_placement = True
    stats.record_resident(torch.tensor([[True, False], [True, True]]))
    stats.record_offloaded(num_cpu_pairs=3, num_pcie_pairs=2, bytes_copied=100)
    stats.record_swaps(2, 50)
    snap = stats.snapshot(with_counts=False)
    assert "counts" not in snap
    assert (snap["gpu_hit_rate"], snap["cpu_share"], snap["pcie_share"]) == (3 / 8, 3 / 8, 2 / 8)
    assert (snap["swaps"], snap["bytes_moved"]) == (2, 150)


def test_empty_snapshot_has_no_division_by_zero():
    stats = RoutingStats(3, 4, "cpu")
    stats.has_placement = True
    snap = stats.snapshot()
    assert snap["steps"] == 0 and snap["mean_experts_touched_per_layer"] == 0.0 and snap["gpu_hit_rate"] == 0.0


def test_record_and_end_step_keep_buffers_in_place():
    """Graph safety: the buffers a captured graph would point at are never reallocated."""
    stats = RoutingStats(2, 4, "cpu")
    buffers = [stats.window_counts, stats.touched, stats.touched_total, stats.num_steps, stats.gpu_pairs]
    pointers = [b.data_ptr() for b in buffers]
    stats.record(1, ids([[0, 3]]))
    stats.record_resident(torch.tensor([[True, True]]))
    stats.end_step()
    assert [b.data_ptr() for b in buffers] == pointers


def test_a_layer_that_never_routes_is_not_averaged_in():
    """An MTP head's MoE layer is a layer of the stats; while speculation is off it routes nothing, and the
    mean over the model's layers must not count it as a layer touching no experts."""
    stats = RoutingStats(3, 5, "cpu")  # layers 0, 1 and the MTP layer 2
    stats.record(0, ids([[0, 1]]))
    stats.record(1, ids([[2, 3]]))
    stats.end_step()
    assert stats.snapshot()["mean_experts_touched_per_layer"] == 2


def _two_steps(stats: RoutingStats) -> None:
    stats.record(0, ids([[0, 1], [1, 2]]).to(stats.touched.device))
    stats.record(1, ids([[4, 3]]).to(stats.touched.device))
    stats.end_step()
    stats.record(0, ids([[3, 1]]).to(stats.touched.device))
    stats.end_step()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_counter_mark_holds_the_counters_as_they_stood_when_taken(device):
    """A benchmark marks the counters between steps; on CUDA the mark must not sync the host (that would drain the
    steps planned ahead), so it is taken under sync debugging set to raise."""
    stats = RoutingStats(3, 5, device)
    _two_steps(stats)
    if device == "cuda":
        torch.cuda.set_sync_debug_mode("error")
    try:
        mark = CounterMark(stats)
    finally:
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("default")
    snap = stats.snapshot(with_counts=False)
    _two_steps(stats)  # later steps do not move the mark
    steps, touched, layers = mark.values()
    # distinct experts a step: layer 0 {0, 1, 2} then {1, 3}; layer 1 {3, 4} then none
    assert (steps, touched, layers) == (2, 3 + 2 + 2, 2)
    assert touched / (steps * layers) == snap["mean_experts_touched_per_layer"]
