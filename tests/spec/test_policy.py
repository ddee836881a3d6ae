"""Draft-length policy: expected tokens per window and the cost model that picks the batch's k."""

import pytest

from strata.spec.policy import DraftCostModel, draft_length, expected_tokens, recover_acceptance, update_acceptance


def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(1.0, 3) == 4.0
    assert expected_tokens(0.0, 3) == 1.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_no_step_times_means_no_choice_yet():
    model = DraftCostModel()
    assert model.best_k(4, [0.8] * 8) is None
    assert draft_length(4, True, 16, 1.0, None) == 1       # the fixed batch-size rule meanwhile: 4 * 4 // 16
    assert draft_length(4, False, 16, 0.1, 0) == 4         # adaptive off pins k
    assert draft_length(4, True, 2, 0.2, None) == 1        # low acceptance: one draft
    assert draft_length(4, True, 2, 0.04, None) == 0       # all but certain to be rejected: none


def test_a_rejected_drafter_is_retried_after_its_acceptance_recovers():
    ema, steps = 0.01, 0
    while draft_length(3, True, 8, ema, None) == 0:
        ema, steps = recover_acceptance(ema), steps + 1
    assert 300 < steps < 500


def test_flat_step_cost_keeps_every_draft():
    """Bandwidth-bound steps cost the same for 8 or 40 tokens: drafts are free, take them all."""
    model = DraftCostModel()
    for tokens in (8, 16, 24, 32, 40):
        model.observe(tokens, 0.010)
    assert model.best_k(4, [0.7] * 8) == 4


def test_step_cost_proportional_to_tokens_turns_speculation_off():
    """Compute-bound steps: k drafts cost (k + 1)x but return fewer than k + 1 tokens unless all hit."""
    model = DraftCostModel()
    for tokens in (32, 64, 96, 128):
        model.observe(tokens, 0.001 * tokens)
    assert model.best_k(3, [0.8] * 32) == 0
    assert draft_length(3, True, 32, 0.8, 0) == 0


def test_unseen_sizes_are_tried_then_judged_by_their_measured_time():
    model = DraftCostModel(ema_weight=1.0)
    model.observe(32, 0.010)                           # only k = 3 with 8 requests seen so far
    assert model.best_k(3, [0.5] * 8) == 0             # k = 0 looks 4x cheaper (optimistic): try it
    model.observe(8, 0.009)                            # measured: barely cheaper
    assert model.best_k(3, [0.5] * 8) > 0
    assert model.estimate(20) == pytest.approx(0.009 + (20 - 8) / (32 - 8) * 0.001)
    assert model.estimate(64) == pytest.approx(0.010)   # above the largest seen: as cheap as it


def test_a_slow_first_measurement_does_not_turn_drafting_off_for_good():
    model = DraftCostModel(ema_weight=0.2, refresh_decisions=4)
    model.observe(32, 0.500)                            # k = 3 at 8 requests, first seen during a compile
    model.observe(8, 0.010)
    assert model.best_k(3, [0.8] * 8) == 0
    chosen = []
    for _ in range(12):                                 # k = 0 runs; the 32-token time goes stale
        k = model.best_k(3, [0.8] * 8)
        chosen.append(k)
        model.observe(8 * (k + 1), 0.010 if k == 0 else 0.012)
    assert chosen[0] == 0 and 3 in chosen               # tried again, measured afresh, and kept
    assert chosen[-1] == 3 and model.seconds[32] == pytest.approx(0.012, rel=0.1)


def test_a_size_that_stays_slow_is_retried_ever_less_often():
    model = DraftCostModel(ema_weight=0.2, refresh_decisions=2)
    model.observe(8, 0.010)
    retries = []
    for step in range(200):
        k = model.best_k(1, [0.5] * 8)
        if k:
            retries.append(step)
        model.observe(8 * (k + 1), 0.010 if k == 0 else 0.100)  # k = 1 is always 10x slower
    gaps = [b - a for a, b in zip(retries, retries[1:])]
    assert len(retries) >= 3 and gaps == sorted(gaps) and gaps[-1] > 2 * gaps[0]


def test_a_smaller_size_measured_before_is_not_retried_on_an_optimistic_guess():
    """Weight-bound steps (a GPU's): plain decoding measured once, barely cheaper than 3 drafts. Once its time
    goes stale it keeps that time, not the proportional guess that made it look 4x cheaper after every wait: the
    batch keeps its drafts. A smaller size never measured is still tried once."""
    model = DraftCostModel(ema_weight=1.0, refresh_decisions=2)
    model.observe(4, 0.0028)                                # k = 0 at 4 requests
    model.observe(16, 0.0029)                               # k = 3
    chosen = []
    for _ in range(200):
        k = model.best_k(3, [0.75] * 4)
        chosen.append(k)
        model.observe(4 * (k + 1), 0.0028 + 0.00001 * 4 * (k + 1))
    assert chosen.count(0) == 0 and chosen.count(1) <= 1 and chosen.count(2) <= 1  # (8 and 12 rows: tried once)
    assert model.estimate(4) == pytest.approx(0.0028)       # stale, kept
    fresh = DraftCostModel(ema_weight=1.0)
    fresh.observe(16, 0.0029)
    assert fresh.best_k(3, [0.75] * 4) == 0                 # never measured: the optimistic guess, tried once


def test_acceptance_recovers_slowly_while_not_drafting_and_falls_on_a_failed_retry():
    ema, trace = 0.0, []   # every draft rejected so far
    for _ in range(1000):
        ema = recover_acceptance(ema)
        trace.append(ema)
    assert all(b > a for a, b in zip(trace, trace[1:])) and trace[-1] <= 1.0
    failed = update_acceptance(0.1, 1, 0)             # a retry at 0.1 whose draft was rejected
    steps = next(n for n in range(1, 1000) if _recovered(failed, n) >= 0.1)
    assert 80 <= steps <= 100                         # retried every ninety-odd steps, not every few


def _recovered(ema: float, steps: int) -> float:
    for _ in range(steps):
        ema = recover_acceptance(ema)
    return ema


def test_drafts_that_promise_almost_nothing_are_not_retried():
    model = DraftCostModel()
    model.observe(1, 0.005)           # only k = 0 measured: every k > 0 would be an optimistic retry
    assert model.best_k(3, [0.02]) == 0
    assert model.best_k(3, [0.3]) > 0


def test_the_mtp_layer_runs_only_on_steps_that_draft_or_feed_a_drafting_prompt():
    """Known before the forward (the runner replays prompt graphs only on steps without the MTP pass)."""
    from strata.config import SpecConfig
    from strata.spec.proposer import Proposer
    from strata.types import ScheduledSlot

    def slot(n, next_k=0, drafting=False, sample=True):
        return ScheduledSlot(0, 0, n, [], [1] * n, sample=sample, next_k=next_k, drafting=drafting)

    mtp = Proposer(SpecConfig(method="mtp", num_speculative_tokens=3), model=None, build_context=None)
    assert mtp.needs_mtp_forward([slot(1, next_k=2)])                       # drafts wanted next step
    assert mtp.needs_mtp_forward([slot(40, drafting=True, sample=False)])   # a prompt chunk feeding its KV
    assert not mtp.needs_mtp_forward([slot(40), slot(1)])                   # nobody drafts: skipped
    suffix = Proposer(SpecConfig(method="suffix", num_speculative_tokens=3), model=None, build_context=None)
    assert not suffix.needs_mtp_forward([slot(1, next_k=2)])
