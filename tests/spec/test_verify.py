"""verify_greedy and verify_rejection: exact verdicts on ragged batches, the target distribution
kept by rejection sampling (chi-square), exactness on one-hot targets, and seeded verdicts that do
not depend on the batch. CPU always; CUDA too on the GPU machine (`-m gpu`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata.spec.verify import verify_greedy, verify_rejection
from stats import chi_square_p_value

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]

# Target rows 0, 1, 2 of a k = 2 window and the draft distributions of drafts 0 and 1, V = 6.
# Row 1 filters token 1 out, so a draft of 1 must always be rejected there.
P = np.array([[0.05, 0.30, 0.10, 0.25, 0.20, 0.10],
              [0.45, 0.00, 0.15, 0.10, 0.20, 0.10],
              [0.10, 0.10, 0.10, 0.20, 0.20, 0.30]])
Q = np.array([[0.30, 0.10, 0.20, 0.10, 0.10, 0.20],
              [0.10, 0.30, 0.10, 0.20, 0.20, 0.10]])


def assert_follows(tokens: list[int], probs: np.ndarray) -> None:
    counts = np.bincount(tokens, minlength=len(probs))
    assert counts[probs == 0].sum() == 0, "a token with target probability 0 was emitted"
    assert chi_square_p_value(counts, probs) > 1e-3, (counts / counts.sum(), probs)


# ---- greedy -------------------------------------------------------------------------------------

def test_greedy_ragged_batch_all_none_partial_and_no_drafts():
    argmax = torch.tensor([5, 6, 7, 8,  9,  1, 2, 3, 4,  0, 0, 0, 0,  3])
    # slots listed out of row order: rows 9..12, 0..3, 4, 5..8, 13
    drafts = [[0, 0, 1], [5, 6, 7], [], [2, 2, 3], []]
    verdicts = verify_greedy(argmax, drafts, row_starts=[9, 0, 4, 5, 13])
    assert verdicts == [([0, 0, 0], 2),          # partial: bonus = argmax at the mismatch row
                        ([5, 6, 7, 8], 3),       # all accepted: bonus from the last row
                        ([9], 0),                # no drafts: plain decode
                        ([1], 0),                # first draft wrong
                        ([3], 0)]


def test_empty_batch_and_bad_layouts():
    assert verify_greedy(torch.empty(0, dtype=torch.int64), [], []) == []
    assert verify_rejection(torch.empty(0, 6), [], []) == []
    with pytest.raises(ValueError, match="rows 2..4"):
        verify_greedy(torch.zeros(4, dtype=torch.int64), [[1, 2]], [2])
    with pytest.raises(ValueError, match="one of each"):
        verify_rejection(torch.zeros(4, 6), [[1]], [0, 2])
    with pytest.raises(ValueError, match="draft_probs"):
        verify_rejection(torch.zeros(4, 6), [[1]], [0], draft_probs=torch.zeros(4, 5))


# ---- rejection sampling: distributions ----------------------------------------------------------

@pytest.mark.parametrize("drafter", ["deterministic", "stochastic"])
def test_rejection_sampling_emits_the_target_distribution(drafter):
    """Each of N slots verifies k = 2 drafts against rows P[0], P[1], P[2] (slots laid out in
    reverse row order). The first emitted token must follow P[0] marginally; the second, given that
    draft 0 was accepted, P[1]; the third, given drafts 0 and 1 accepted (the bonus), P[2]."""
    num_slots, k = 20000, 2
    generator = torch.Generator().manual_seed(5)
    row_starts = [(k + 1) * (num_slots - 1 - i) for i in range(num_slots)]
    target_probs = torch.tensor(P, dtype=torch.float32).repeat(num_slots, 1)         # [3N, V]
    if drafter == "deterministic":
        drafts = [[3, 0], [3, 1]] * (num_slots // 2)
        draft_probs = None
        first_acceptance = P[0][3]
    else:
        drafted = torch.stack([torch.multinomial(torch.tensor(q), num_slots, replacement=True,
                                                 generator=generator) for q in Q], dim=1)  # [N, k]
        drafts = drafted.tolist()
        # The slot's last row is never read: NaN there would poison any token drawn from it.
        q_rows = torch.cat([torch.tensor(Q, dtype=torch.float32), torch.full((1, 6), float("nan"))])
        draft_probs = q_rows.repeat(num_slots, 1)
        first_acceptance = np.minimum(P[0], Q[0]).sum()
        draft_counts = np.bincount(drafted[:, 0].numpy(), minlength=6)
        assert chi_square_p_value(draft_counts, P[0]) < 1e-6, "the test must tell q from p"

    verdicts = verify_rejection(target_probs, drafts, row_starts, draft_probs, shared_generator=generator)

    assert all(len(tokens) == n + 1 and tokens[:n] == d[:n] for (tokens, n), d in zip(verdicts, drafts))
    assert_follows([tokens[0] for tokens, _ in verdicts], P[0])
    assert_follows([tokens[1] for tokens, n in verdicts if n >= 1], P[1])
    assert_follows([tokens[2] for tokens, n in verdicts if n >= 2], P[2])
    accepted_rate = np.mean([n >= 1 for _, n in verdicts])
    assert abs(accepted_rate - first_acceptance) < 4 * np.sqrt(first_acceptance / num_slots)
    if drafter == "deterministic":
        assert not any(n == 2 and d[1] == 1 for (_, n), d in zip(verdicts, drafts)), \
            "token 1 has probability 0 in row 1: a draft of it must be rejected"


def test_rejection_without_residual_mass_falls_back_to_the_target():
    """A draft rejected although p is (by rounding) all on it leaves max(p - q, 0) = 0 everywhere;
    the token must come from p, not from an all-zero row (which would be token 0)."""
    target_probs = torch.tensor([[0.0, 0.0, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]]).repeat(500, 1)
    verdicts = verify_rejection(target_probs, [[2]] * 500, [2 * i for i in range(500)],
                                shared_generator=torch.Generator().manual_seed(0))
    assert 100 < sum(n == 0 for _, n in verdicts) < 400
    assert all(tokens[0] == 2 for tokens, _ in verdicts)


# ---- rejection sampling: exactness and seeds ----------------------------------------------------

def random_batch(num_drafts: list[int], vocab_size: int, seed: int, device: str):
    """target_probs [R, V], draft_probs [R, V], drafts and row starts; drafts often match argmax."""
    generator = torch.Generator().manual_seed(seed)
    num_rows = sum(k + 1 for k in num_drafts)
    target_probs = torch.randn(num_rows, vocab_size, generator=generator).mul(2).softmax(dim=-1)
    draft_probs = torch.randn(num_rows, vocab_size, generator=generator).mul(2).softmax(dim=-1)
    argmax = target_probs.argmax(dim=-1)
    row_starts, drafts, row = [], [], 0
    for k in num_drafts:
        row_starts.append(row)
        guesses = torch.randint(vocab_size, (k,), generator=generator)
        use_argmax = torch.rand(k, generator=generator) < 0.7
        drafts.append(torch.where(use_argmax, argmax[row:row + k], guesses).tolist())
        row += k + 1
    return target_probs.to(device), draft_probs.to(device), drafts, row_starts


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("stochastic", [False, True])
def test_one_hot_target_gives_exactly_the_greedy_verdict(device, stochastic):
    for seed in range(5):
        target_probs, draft_probs, drafts, row_starts = random_batch([3, 0, 1, 4, 3, 2], 50, seed, device)
        argmax = target_probs.argmax(dim=-1)
        one_hot = torch.zeros_like(target_probs).scatter_(1, argmax.unsqueeze(1), 1.0)
        generator = torch.Generator(device=device).manual_seed(seed)
        verdicts = verify_rejection(one_hot, drafts, row_starts, draft_probs if stochastic else None,
                                    shared_generator=generator)
        assert verdicts == verify_greedy(argmax, drafts, row_starts)


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_slot_verdict_is_reproducible_and_independent_of_the_batch(device):
    """Slot 'A' (k = 3, own generator) verified alone and inside a batch of seeded and unseeded
    slots, at another row offset: same verdict. A rerun of the whole batch is identical."""
    def seeded(seed):
        return torch.Generator(device=device).manual_seed(seed)

    verdicts_alone = []
    for seed in range(12):
        target_probs, draft_probs, drafts, row_starts = random_batch([2, 3, 0, 3, 1], 40, seed, device)
        a = 3                                                      # slot A's index in the batch
        rows_a = slice(row_starts[a], row_starts[a] + 4)
        for q in (None, draft_probs):
            alone = verify_rejection(target_probs[rows_a], [drafts[a]], [0],
                                     None if q is None else q[rows_a], [seeded(100 + seed)])[0]
            generators = [seeded(7), None, None, seeded(100 + seed), None]
            batch = verify_rejection(target_probs, drafts, row_starts, q, generators, seeded(seed))
            generators = [seeded(7), None, None, seeded(100 + seed), None]
            assert verify_rejection(target_probs, drafts, row_starts, q, generators, seeded(seed)) == batch
            assert batch[a] == alone
            verdicts_alone.append(alone)
    assert len({(tuple(tokens), n) for tokens, n in verdicts_alone}) > 3, "the seed must matter"
