"""The CPU causal conv of Gated DeltaNet and PLE layers (strata/kernels/cpu_gdn.conv_windows): each sequence's
history read from and written back to its pool row, the same bits as the model's torch form
(model/gated_delta_net.causal_conv1d_ragged with STRATA_TORCH_CPU_GDN=1); a window's rows equal its tokens one at a
time; bad slots and shapes refused before anything is written."""

from itertools import accumulate
from types import SimpleNamespace

import pytest
import torch

from strata.kernels import cpu_gdn
from strata.model import cpu_ops
from strata.model.gated_delta_net import causal_conv1d_ragged

pytestmark = pytest.mark.skipif(not cpu_gdn.conv_available(), reason="no C compiler for the native kernels")


def _ctx(query_lens, slots, has_initial, keep=False):
    """What causal_conv1d_ragged reads of a ForwardContext."""
    return SimpleNamespace(state_slot_ids=torch.tensor(slots), has_initial_state=torch.tensor(has_initial),
                           query_start_loc=torch.tensor([0, *accumulate(query_lens)]), query_lens=tuple(query_lens),
                           num_seqs=len(query_lens), keep_window_states=keep, real_query_lens=None,
                           cached=lambda key, build: build())


def _case(channels, width, dilation, tokens, pool_rows=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, channels + 7, generator=g)[:, 3:3 + channels]  # rows strided, as a split projection's
    x[0, :5] = 0.0                                                           # zero products: +0, never -0
    weight = torch.randn(channels, width, generator=g)
    state = torch.randn(pool_rows, channels, (width - 1) * dilation, generator=g)
    return x, weight, state


def _both(x, weight, state, ctx, dilation, monkeypatch):
    """(out, windows, state after) from the native kernel, then from the torch form on a copy of the state."""
    torch_state = state.clone()
    assert cpu_ops.cpu_conv_on(x, weight, state)
    out, windows = causal_conv1d_ragged(x, weight, state, ctx, dilation)
    monkeypatch.setenv("STRATA_TORCH_CPU_GDN", "1")
    assert not cpu_ops.cpu_conv_on(x, weight, torch_state)
    expected, expected_windows = causal_conv1d_ragged(x, weight, torch_state, ctx, dilation)
    monkeypatch.delenv("STRATA_TORCH_CPU_GDN")
    return (out, windows, state), (expected, expected_windows, torch_state)


@pytest.mark.parametrize("channels, width, dilation", [(8192, 4, 1), (300, 4, 1), (33, 2, 1), (70, 3, 3)])
@pytest.mark.parametrize("query_lens, keep", [([1], False), ([1, 1, 1, 1], True), ([4, 1, 40, 2], True),
                                              ([70, 3], False)])
def test_equals_the_torch_form_bit_for_bit(channels, width, dilation, query_lens, keep, monkeypatch):
    x, weight, state = _case(channels, width, dilation, sum(query_lens))
    ctx = _ctx(query_lens, [4, 1, 0, 5][:len(query_lens)], [True, False, True, True][:len(query_lens)], keep)
    untouched = state[[2, 3]].clone()
    got, expected = _both(x, weight, state, ctx, dilation, monkeypatch)
    for a, b in zip(got, expected):
        assert (a is None and b is None) or (torch.equal(a, b) and torch.equal(a.signbit(), b.signbit()))
    assert torch.equal(state[[2, 3]], untouched)  # rows of sequences not in the step


def test_a_window_equals_its_tokens_one_at_a_time():
    x, weight, state = _case(300, 4, 1, 9)
    one_by_one = state.clone()
    out, windows = cpu_gdn.conv_windows(x, weight, state, torch.tensor([2]), torch.tensor([0]), torch.tensor([9]),
                                        torch.tensor([1]), keep_windows=True)
    for t in range(9):
        row, window = cpu_gdn.conv_windows(x[t:t + 1], weight, one_by_one, torch.tensor([2]), torch.tensor([0]),
                                           torch.tensor([1]), torch.tensor([1]), keep_windows=True)
        assert torch.equal(row[0], out[t]) and torch.equal(window[0], windows[t])
        assert torch.equal(one_by_one[2], window[0])
    assert torch.equal(one_by_one, state)


def test_bad_slots_shapes_and_histories_are_refused_before_anything_is_written():
    x, weight, state = _case(64, 4, 1, 3)
    before = state.clone()
    ok = (torch.tensor([0]), torch.tensor([0]), torch.tensor([3]), torch.tensor([1]))
    with pytest.raises(IndexError, match="outside the pool"):
        cpu_gdn.conv_windows(x, weight, state, torch.tensor([6]), *ok[1:])
    with pytest.raises(IndexError, match="outside the pool"):
        cpu_gdn.conv_windows(x, weight, state, ok[0], ok[1], torch.tensor([4]), ok[3])
    with pytest.raises(ValueError, match="state"):
        cpu_gdn.conv_windows(x, weight, state[:, :, :2].contiguous(), *ok)
    with pytest.raises(ValueError, match="float32"):
        cpu_gdn.conv_windows(x.double(), weight, state, *ok)
    long_history = torch.zeros(2, 64, 33)
    with pytest.raises(IndexError, match="at most 32"):
        cpu_gdn.conv_windows(x, torch.randn(64, 34), long_history, *ok)
    assert torch.equal(state, before)
