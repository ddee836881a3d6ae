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
