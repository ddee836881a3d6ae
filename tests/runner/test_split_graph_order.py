"""A split graph's replay order, with stand-ins for the graphs and flags (CPU): an ungated split runs its host
function, then launches the next graph; a gated one launches the next graph first (it waits on the flag on the
device) and raises the flag after the host function, also when that fails. The waiting kernel itself:
tests/kernels/test_host_flag.py; on a GPU: tests/runner/test_split_graphs.py."""

from __future__ import annotations

import pytest

from strata.split_graphs import SplitGraph


class _Graph:
    def __init__(self, name: int, events: list) -> None:
        self.name, self.events = name, events

    def replay(self) -> None:
        self.events.append(f"graph {self.name}")


class _Flag:
    def __init__(self, name: int, events: list) -> None:
        self.name, self.events = name, events

    def raise_(self) -> None:
        self.events.append(f"raise {self.name}")


def _split(events: list, gated: list[bool], failing: int | None = None) -> SplitGraph:
    split = SplitGraph()
    split.graphs = [_Graph(i, events) for i in range(len(gated) + 1)]

    def host_fn(i):
        def run(num_real_rows: int) -> None:
            events.append(f"host {i} rows {num_real_rows}")
            if i == failing:
                raise RuntimeError("host part failed")
        return run

    split.host_fns = [host_fn(i) for i in range(len(gated))]
    split.flags = [_Flag(i, events) if g else None for i, g in enumerate(gated)]
    return split


def test_a_gated_split_launches_its_next_graph_before_the_host_function():
    events = []
    _split(events, [True, False, True]).replay(3)
    assert events == ["graph 0", "graph 1", "host 0 rows 3", "raise 0",   # gated: launched ahead, then raised
                      "host 1 rows 3", "graph 2",                          # ungated: after its host function
                      "graph 3", "host 2 rows 3", "raise 2"]


def test_a_failing_host_function_still_raises_its_flag():
    events = []
    with pytest.raises(RuntimeError, match="host part failed"):
        _split(events, [True, True], failing=0).replay(1)
    assert events == ["graph 0", "graph 1", "host 0 rows 1", "raise 0"]  # the waiting graph goes on; nothing after
