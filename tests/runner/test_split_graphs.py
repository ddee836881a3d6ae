"""On a CUDA device: a step captured as graphs split at host points replays its parts in order, with
the host functions between them reading what the previous graph copied out and writing what the
next graph reads; outside a capture split_here does nothing."""

from __future__ import annotations

import pytest
import torch

from strata.split_graphs import SplitCapture, capturing, split_here

pytestmark = pytest.mark.gpu


def test_host_functions_run_between_the_graphs_in_capture_order():
    x = torch.zeros(4, device="cuda")
    out_host = torch.zeros(4, pin_memory=True)
    in_host = torch.zeros(4, pin_memory=True)
    from_host = torch.zeros(4, device="cuda")
    calls = []

    def host(num_real_rows: int) -> None:
        torch.cuda.current_stream().synchronize()
        calls.append((num_real_rows, out_host.tolist()))
        in_host.copy_(out_host * 10)
        from_host.copy_(in_host, non_blocking=True)

    def forward():
        y = x + 1
        out_host.copy_(y, non_blocking=True)
        assert split_here(host)
        return y + from_host

    assert not split_here(host) and not capturing()
    with SplitCapture(torch.cuda.graph_pool_handle()) as capture:
        result = forward()
    graph = capture.result
    assert graph.num_splits == 1 and len(graph.graphs) == 2
    for value in (1.0, 5.0):
        x.fill_(value)
        graph.replay(3)
        torch.cuda.synchronize()
        assert result.tolist() == [(value + 1) * 11] * 4
    assert calls == [(3, [2.0] * 4), (3, [6.0] * 4)]
    graph.reset()


def test_a_graph_dropped_in_a_reference_cycle_does_not_break_a_later_capture():
    """A dropped engine's graphs sit in reference cycles; the collector freeing one mid-capture would destroy its
    executable there, which CUDA forbids while a stream captures (torch >= 2.9 no longer collects first)."""
    x = torch.zeros(4, device="cuda")
    old = SplitCapture(torch.cuda.graph_pool_handle())
    with old:
        x.add_(1)

    class Engine:  # a cycle holding the captured graph, as an engine's objects do
        pass

    engine = Engine()
    engine.graph, engine.me = old.result, engine
    del engine, old
    with SplitCapture(torch.cuda.graph_pool_handle()) as capture:
        garbage = [[] for _ in range(20000)]  # enough allocations to set off a collection if one may run
        y = x * 2
    del garbage
    x.fill_(3.0)
    capture.result.replay(4)
    torch.cuda.synchronize()
    assert y.tolist() == [6.0] * 4
    capture.result.reset()


def test_the_collector_is_held_off_during_a_capture_and_given_back_after():
    import gc
    assert gc.isenabled()
    x = torch.zeros(4, device="cuda")
    with SplitCapture(torch.cuda.graph_pool_handle()) as capture:
        assert not gc.isenabled()
        x.add_(1)  # something to capture
    assert gc.isenabled()
    capture.result.reset()


def test_a_gated_split_runs_its_next_graph_after_the_host_function_though_launched_before():
    """The next graph is launched before the host function (it waits on a flag in pinned memory), so it must not
    read the host's buffer before the host function, which takes its time, has written it and raised the flag."""
    import time

    from strata.kernels.host_flag import HostFlag

    x = torch.zeros(4, device="cuda")
    in_host = torch.zeros(4, pin_memory=True)
    from_host = torch.zeros(4, device="cuda")
    flag = HostFlag()
    done = torch.cuda.Event(external=True)  # a node of the graph, which the host waits for at each replay

    def host(num_real_rows: int) -> None:
        done.synchronize()  # an event before the split, never the stream (the next graph waits on it)
        time.sleep(0.05)
        in_host.fill_(float(num_real_rows))

    def forward():
        y = x + 1
        done.record()
        assert split_here(host, flag)
        from_host.copy_(in_host, non_blocking=True)
        return y + from_host

    with SplitCapture(torch.cuda.graph_pool_handle()) as capture:
        result = forward()
    graph = capture.result
    assert graph.num_splits == 1 and graph.flags == [flag]
    for value, rows in ((1.0, 3), (5.0, 7)):
        x.fill_(value)
        graph.replay(rows)
        torch.cuda.synchronize()
        assert result.tolist() == [value + 1 + rows] * 4
        assert not flag.raised  # cleared by the graph for the next replay
