"""SyntheticDrafter: the mean accepted length it promises, and drafts that verify_greedy accepts
exactly as planned."""

from __future__ import annotations

import pytest
import torch

from strata.spec.synthetic import SyntheticDrafter, synthetic_drafts
from strata.spec.verify import verify_greedy

@pytest.mark.parametrize("acceptance_length, k", [(1.5, 3), (2.5, 4), (3.7, 4), (4.2, 7), (2.0, 1)])
def test_synthetic_mean_accepted_length_is_the_target(acceptance_length, k):
    drafter = SyntheticDrafter(acceptance_length, seed=1)
    draws = [drafter.propose_synthetic(k) for _ in range(20000)]
    assert all(0 <= a <= k for a in draws)
    mean_length = 1 + sum(draws) / len(draws)
    assert abs(mean_length - acceptance_length) <= 0.02 * acceptance_length
    # geometric-like: no position is accepted more often than the one before it
    reached = [sum(a >= j for a in draws) for j in range(1, k + 1)]
    assert reached == sorted(reached, reverse=True)


def test_synthetic_edges():
    assert {SyntheticDrafter(1.0, seed=0).propose_synthetic(4) for _ in range(200)} == {0}
    assert {SyntheticDrafter(5.0, seed=0).propose_synthetic(4) for _ in range(200)} == {4}
    assert {SyntheticDrafter(9.0, seed=0).propose_synthetic(3) for _ in range(200)} == {3}  # k too small
    assert SyntheticDrafter(3.0, seed=0).propose_synthetic(0) == 0
    with pytest.raises(ValueError, match=">= 1"):
        SyntheticDrafter(0.5, seed=0)
    first = SyntheticDrafter(2.5, seed=7)
    second = SyntheticDrafter(2.5, seed=7)
    assert [first.propose_synthetic(4) for _ in range(50)] == [second.propose_synthetic(4) for _ in range(50)]


@pytest.mark.parametrize("k", [0, 1, 4])
def test_synthetic_drafts_are_accepted_exactly_num_accept_times(k):
    vocab_size = 5
    target_tokens = [4, 0, 3, 4, 2][:k + 1]          # includes the wrap-around 4 -> 0
    for num_accept in range(k + 1):
        drafts = synthetic_drafts(target_tokens, num_accept, k, vocab_size)
        assert len(drafts) == k
        assert sum(d == t for d, t in zip(drafts, target_tokens)) == num_accept
        assert all(0 <= d < vocab_size for d in drafts)
        [(tokens, num_accepted)] = verify_greedy(torch.tensor(target_tokens), [drafts], [0])
        assert num_accepted == num_accept
        assert tokens == target_tokens[:num_accept + 1]
    with pytest.raises(ValueError):
        synthetic_drafts(target_tokens, k + 1, k, vocab_size)
