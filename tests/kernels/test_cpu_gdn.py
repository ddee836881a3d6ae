"""The CPU gated delta rule (strata/kernels/cpu_gdn.py): each sequence's state read and written in place in the
pool, against the torch reference (strata.kernels.gdn.gdn_recurrent_ref, the rule the model's torch path
computes); a token's result the same bits whatever window, batch, thread count or build it comes in; bad
slots and tensors rejected before anything is written."""

import pytest
import torch

from strata.kernels import cpu_gdn, cpu_quant
from strata.kernels.gdn import gdn_recurrent_ref

pytestmark = pytest.mark.skipif(not cpu_gdn.available(), reason="no C compiler for the native kernels")


def _case(query_lens, heads=4, dim_k=16, dim_v=40, pool_rows=6, seed=0):
    """Random L2-normalised q / k, v, gates and a pool of random states; the sequences on rows 5, 0, 3, ..."""
    g = torch.Generator().manual_seed(seed)
    tokens = sum(query_lens)
    q = torch.nn.functional.normalize(torch.randn(tokens, heads, dim_k, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(tokens, heads, dim_k, generator=g), dim=-1)
    v = torch.randn(tokens, heads, dim_v, generator=g)
    log_decay = -torch.rand(tokens, heads, generator=g) * 2
    beta = torch.rand(tokens, heads, generator=g)
    pool = torch.randn(pool_rows, heads, dim_k, dim_v, generator=g)
    slots = torch.tensor([5, 0, 3, 1, 2, 4][:len(query_lens)])
    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()])
    return q, k, v, log_decay, beta, pool, slots, starts


def _native(q, k, v, log_decay, beta, pool, slots, starts, has_initial, keep=True):
    """cpu_gdn.recurrent with the model's conventions: q scaled by Dk^-1/2, decay = exp(log_decay)."""
    out = torch.full(v.shape, float("nan"))
    all_states = torch.full((q.shape[0], *pool.shape[1:]), float("nan")) if keep else None
    cpu_gdn.recurrent((q * q.shape[-1] ** -0.5).contiguous(), k, v, log_decay.exp(), beta, pool, slots, starts[:-1],
                      starts[1:], has_initial.long(), out, all_states)
    return out, all_states


@pytest.mark.parametrize("query_lens", [[1], [1, 1, 1], [4, 1, 7], [16, 2]])
@pytest.mark.parametrize("dim_v", [40, 64, 7])
@pytest.mark.parametrize("build", ["best", "portable"])
def test_equals_the_torch_rule_and_updates_the_pool_in_place(query_lens, dim_v, build, monkeypatch):
    """Ragged windows, a sequence starting from zeros (whatever its pool row held), column tiles cut short;
    the rows of idle slots stay untouched."""
    if build == "portable":
        monkeypatch.setattr(cpu_gdn, "_kernel", lambda: getattr(cpu_quant._require(), cpu_quant._GDN))
    q, k, v, log_decay, beta, pool, slots, starts = _case(query_lens, dim_v=dim_v)
    has_initial = torch.tensor([i % 2 == 0 for i in range(len(query_lens))])
    ref_pool = pool.clone()
    ref_out, ref_states = gdn_recurrent_ref(q, k, v, log_decay, beta, ref_pool, slots, starts, has_initial)
    out, all_states = _native(q, k, v, log_decay, beta, pool, slots, starts, has_initial)
    torch.testing.assert_close(out, ref_out, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(all_states, ref_states, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(pool, ref_pool, atol=2e-6, rtol=2e-6)
    idle = sorted(set(range(pool.shape[0])) - set(slots.tolist()))
    assert torch.equal(pool[idle], _case(query_lens, dim_v=dim_v)[5][idle])


def test_a_window_equals_its_tokens_one_by_one_in_any_batch_and_thread_count():
    """Verification windows must commit exactly what plain decoding would: the state after each token of a
    window of 5 (beside two other sequences, on every thread) has the bits of 5 one-token calls alone."""
    q, k, v, log_decay, beta, pool, slots, starts = _case([3, 5, 2], heads=8, dim_k=32, dim_v=64)
    has_initial = torch.tensor([True, True, False])
    alone = pool.clone()
    window_out, window_states = _native(q, k, v, log_decay, beta, pool, slots, starts, has_initial)
    cpu_quant.set_num_threads(1)
    try:
        for t in range(3, 8):  # the second sequence's tokens, one call each
            one = slice(t, t + 1)
            out, states = _native(q[one].contiguous(), k[one].contiguous(), v[one].contiguous(),
                                  log_decay[one].contiguous(), beta[one].contiguous(), alone, slots[1:2],
                                  torch.tensor([0, 1]), torch.tensor([True]))
            assert torch.equal(out[0], window_out[t]) and torch.equal(states[0], window_states[t])
    finally:
        cpu_quant._num_threads = None
    assert torch.equal(alone[slots[1]], pool[slots[1]])


def test_bad_slots_and_tensors_are_refused_before_anything_is_written():
    q, k, v, log_decay, beta, pool, slots, starts = _case([2, 1])
    before = pool.clone()
    with pytest.raises(IndexError, match="outside the pool"):
        _native(q, k, v, log_decay, beta, pool, torch.tensor([0, 6]), starts, torch.tensor([True, True]))
    with pytest.raises(IndexError, match="outside the pool"):
        _native(q, k, v, log_decay, beta, pool, slots, torch.tensor([0, 2, 4]), torch.tensor([True, True]))
    assert torch.equal(pool, before)
    with pytest.raises(ValueError, match="float32"):
        _native(q, k, v.double(), log_decay, beta, pool, slots, starts, torch.tensor([True, True]))
    with pytest.raises(ValueError, match="pool"):
        _native(q, k, v, log_decay, beta, pool[:, :, :8].contiguous(), slots, starts, torch.tensor([True, True]))


def test_leading_windows_keep_only_their_rows_of_states():
    """A verification step's windows ahead of a prompt chunk: all_states needs rows only up to the last token given
    (the model keeps [T_w, ...] there, not the chunk's rows); fewer rows than that are refused."""
    q, k, v, log_decay, beta, pool, slots, starts = _case([3, 2, 9])
    has_initial = torch.tensor([True, True, False])
    full_pool = pool.clone()
    _, full_states = _native(q, k, v, log_decay, beta, full_pool, slots[:2], starts[:3], has_initial[:2])
    kept = torch.full((5, *pool.shape[1:]), float("nan"))
    scaled = (q * q.shape[-1] ** -0.5).contiguous()
    out = torch.empty(v.shape)
    cpu_gdn.recurrent(scaled, k, v, log_decay.exp(), beta, pool, slots[:2], starts[:2], starts[1:3],
                      has_initial[:2].long(), out, kept)
    assert torch.equal(kept, full_states[:5])
    with pytest.raises(ValueError, match="all_states"):
        cpu_gdn.recurrent(scaled, k, v, log_decay.exp(), beta, pool, slots, starts[:-1], starts[1:],
                          has_initial.long(), out, kept)
