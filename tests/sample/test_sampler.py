"""Sampler tests: exact greedy, seeded reproducibility, the sampled distributions (chi-square),
penalties, min_tokens and logprobs. CPU only, a few seconds in all."""

from __future__ import annotations

import math
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strata.sample import (Sampler, apply_penalties, apply_top_k_top_p, processed_probs,
                           sample_from_probs)
from strata.types import SamplingParams
from stats import chi_square_p_value

# CPU always; CUDA too on the GPU machine (`-m gpu`), where generators and indexing differ.
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]

# Distinct, unsorted logits over V = 8 so that index bookkeeping bugs (sort/scatter) show up.
LOGITS_8 = [0.5, 2.0, -1.0, 1.4, 0.0, 1.8, -2.0, 1.0]


def reference_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) -> np.ndarray:
    """Plain float64 statement of vLLM's order: temperature -> top_k -> top_p -> min_p."""
    x = np.asarray(logits, dtype=np.float64) / temperature
    keep = np.ones(len(x), dtype=bool)
    order = np.argsort(-x, kind="stable")
    if 0 < top_k < len(x):
        keep[order[top_k:]] = False
    probs = _softmax(x, keep)
    if top_p < 1.0:
        mass_before = 0.0
        for token in order:                     # most likely first
            if mass_before >= top_p:
                keep[token] = False
            mass_before += probs[token]
        probs = _softmax(x, keep)
    if min_p > 0.0:
        keep &= probs >= min_p * probs.max()
        probs = _softmax(x, keep)
    return probs


def _softmax(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    e = np.where(keep, np.exp(x - x[keep].max()), 0.0)
    return e / e.sum()


def make_sampler(max_num_seqs=8, vocab_size=8, eos_token_ids=(7,), seed=0, device="cpu") -> Sampler:
    return Sampler(max_num_seqs, vocab_size, list(eos_token_ids), device=device, seed=seed)


# ---- greedy -------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_greedy_rows_take_exact_argmax_in_a_mixed_batch(device):
    torch.manual_seed(0)
    vocab_size = 1000
    sampler = make_sampler(max_num_seqs=8, vocab_size=vocab_size, device=device)
    plans = {0: SamplingParams(temperature=0.0), 1: SamplingParams(temperature=1.5, top_k=50),
             2: SamplingParams(temperature=0.0, top_p=0.5), 3: SamplingParams(temperature=1.0, seed=3),
             5: SamplingParams(temperature=0.0, seed=9, min_p=0.3), 6: SamplingParams(top_p=0.9)}
    for slot_id, params in plans.items():
        sampler.add_slot(slot_id, params, prompt_token_ids=[1, 2, 3])
    slot_ids = [6, 0, 3, 2, 1, 5]
    greedy_rows = [1, 3, 5]
    for _ in range(5):
        # Flat logits make the sampled rows almost surely miss the argmax, so a mixed-up row shows.
        logits = torch.randn(len(slot_ids), vocab_size, device=device) * 0.1
        out = sampler.sample(logits, slot_ids)
        expected = logits.argmax(dim=-1).tolist()
        assert [out.token_ids[row] for row in greedy_rows] == [expected[row] for row in greedy_rows]
        assert sum(out.token_ids[row] == expected[row] for row in (0, 2, 4)) <= 1
        assert out.logprobs == [None] * len(slot_ids)
        for slot_id, token_id in zip(slot_ids, out.token_ids):
            sampler.append_output(slot_id, [token_id])


# ---- seeds --------------------------------------------------------------------------------------

def _run_seeded(slot_plan: dict[int, SamplingParams], target_slot: int, logits_steps, vocab_size,
                resume_after: int = 0, shared_seed: int = 0, device: str = "cpu") -> list[int]:
    """Sample len(logits_steps) steps; return the tokens `target_slot` got. Other slots get other
    logits rows; with resume_after > 0 the target is preempted there and resumes in slot 7."""
    sampler = Sampler(8, vocab_size, [0], device=device, seed=shared_seed)
    for slot_id, params in slot_plan.items():
        sampler.add_slot(slot_id, params, [1, 2])
    slot_ids = sorted(slot_plan, reverse=True)
    target_row = slot_ids.index(target_slot)
    tokens = []
    for step, target_logits in enumerate(logits_steps):
        if resume_after and step == resume_after:
            sampler.remove_slot(target_slot)
            sampler.add_slot(7, slot_plan[target_slot], [1, 2], output_token_ids=tokens)
            slot_ids[target_row] = 7
        logits = torch.randn(len(slot_ids), vocab_size)
        logits[target_row] = target_logits
        logits = logits.to(device)
        out = sampler.sample(logits, slot_ids)
        tokens.append(out.token_ids[target_row])
        for slot_id, token_id in zip(slot_ids, out.token_ids):
            sampler.append_output(slot_id, [token_id])
    return tokens


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_request_is_reproducible_and_independent_of_its_batch(device):
    vocab_size = 500
    gen = torch.Generator().manual_seed(1)
    logits_steps = [torch.randn(vocab_size, generator=gen) * 0.5 for _ in range(8)]
    target = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, repetition_penalty=1.2)
    alone = _run_seeded({2: target}, 2, logits_steps, vocab_size, device=device)
    again = _run_seeded({2: target}, 2, logits_steps, vocab_size, shared_seed=77, device=device)
    crowded = _run_seeded({0: SamplingParams(seed=1234), 2: target, 4: SamplingParams(),
                           5: SamplingParams(seed=5, top_k=10), 7: SamplingParams(temperature=0.0)},
                          2, logits_steps, vocab_size, shared_seed=3, device=device)
    other_seed = _run_seeded({2: SamplingParams(temperature=1.0, top_p=0.95, seed=1235,
                                                repetition_penalty=1.2)}, 2, logits_steps, vocab_size,
                             device=device)
    assert alone == again == crowded
    assert other_seed != alone   # the seed matters: the test above could otherwise pass vacuously


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_positions_ahead_draw_what_sample_draws_there(device):
    """sample_seeded_positions' row at offset j draws the token sample() draws once j more outputs are committed
    (what a verification window of a seeded request relies on), for two slots of other seeds at once."""
    vocab_size = 400
    gen = torch.Generator().manual_seed(3)
    logits_steps = [torch.randn(vocab_size, generator=gen) * 0.4 for _ in range(4)]
    params = {1: SamplingParams(temperature=0.9, top_p=0.9, seed=11), 5: SamplingParams(temperature=1.3, seed=12)}
    ahead = make_sampler(vocab_size=vocab_size, device=device)
    for slot_id, p in params.items():
        ahead.add_slot(slot_id, p, [1, 2], output_token_ids=[9])
    rows = [(slot_id, j) for slot_id in params for j in range(4)]
    logits = torch.stack([logits_steps[j] for _, j in rows]).to(device)                       # [8, V]
    probs = ahead.window_probs(logits, [slot_id for slot_id, _ in rows])
    drawn = ahead.sample_seeded_positions(probs, [slot_id for slot_id, _ in rows], [j for _, j in rows]).tolist()
    for slot_id, p in params.items():
        plain = make_sampler(vocab_size=vocab_size, device=device)
        plain.add_slot(slot_id, p, [1, 2], output_token_ids=[9])
        expected = []
        for j in range(4):
            token = plain.sample(logits_steps[j][None].to(device), [slot_id]).token_ids[0]
            expected.append(token)
            plain.append_output(slot_id, [token])
        assert [t for (s, _), t in zip(rows, drawn) if s == slot_id] == expected
    assert len(set(drawn)) > 2  # not one token throughout: the draws differ by position and seed


def test_seeded_request_resumed_after_preemption_continues_identically():
    vocab_size = 300
    gen = torch.Generator().manual_seed(2)
    logits_steps = [torch.randn(vocab_size, generator=gen) * 0.3 for _ in range(6)]
    plan = {1: SamplingParams(seed=42, presence_penalty=0.5), 3: SamplingParams()}
    uninterrupted = _run_seeded(plan, 1, logits_steps, vocab_size)
    resumed = _run_seeded(plan, 1, logits_steps, vocab_size, resume_after=3)
    assert resumed == uninterrupted


def test_unseeded_rows_follow_the_shared_seed():
    logits = torch.zeros(4, 100)
    outputs = []
    for seed in (5, 5, 6):
        sampler = Sampler(4, 100, [0], seed=seed)
        for slot_id in range(4):
            sampler.add_slot(slot_id, SamplingParams(), [1])
        outputs.append(sampler.sample(logits, [0, 1, 2, 3]).token_ids)
    assert outputs[0] == outputs[1] != outputs[2]


# ---- distributions ------------------------------------------------------------------------------

DISTRIBUTION_CASES = [
    dict(temperature=1.0),
    dict(temperature=0.6),
    dict(temperature=2.5),
    dict(top_k=3),
    dict(top_p=0.7),
    dict(min_p=0.3),
    dict(temperature=1.3, top_k=6, top_p=0.85, min_p=0.1),
    dict(top_p=0.62, min_p=0.3),        # min_p before top_p would keep 2 tokens instead of 3
    dict(temperature=0.8, top_k=1),
]


@pytest.mark.parametrize("case", DISTRIBUTION_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_processed_probs_and_draws_match_the_reference_distribution(case):
    num_draws = 20000
    expected = reference_probs(LOGITS_8, **case)
    params = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **case}
    probs = processed_probs(torch.tensor([LOGITS_8]),
                            torch.tensor([params["temperature"]]), top_k=torch.tensor([params["top_k"]]),
                            top_p=torch.tensor([params["top_p"]]), min_p=torch.tensor([params["min_p"]]))
    np.testing.assert_allclose(probs[0].double().numpy(), expected, rtol=1e-5, atol=1e-7)

    draws = sample_from_probs(probs.expand(num_draws, -1), generator=torch.Generator().manual_seed(11))
    counts = np.bincount(draws.numpy(), minlength=8)
    assert counts[expected == 0].sum() == 0, "a filtered-out token was drawn"
    if (expected > 0).sum() > 1:
        assert chi_square_p_value(counts, expected) > 1e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [dict(temperature=0.9, top_k=5, top_p=0.9, min_p=0.05),
                                  dict(temperature=0.9, top_k=3)])   # top_k alone: topk, not a sort
def test_sampler_draws_match_the_reference_distribution_end_to_end(device, case):
    """Through Sampler.sample: per-slot parameters, unseeded and seeded rows, top_k + top_p + min_p."""
    num_slots, num_steps = 1000, 20
    sampler = Sampler(num_slots, 8, eos_token_ids=[], device=device, seed=4)
    for slot_id in range(num_slots):
        sampler.add_slot(slot_id, SamplingParams(**case, seed=slot_id if slot_id % 4 == 0 else None), [0])
    logits = torch.tensor([LOGITS_8], device=device).expand(num_slots, -1)
    slot_ids = list(range(num_slots))
    counts = np.zeros(8, dtype=np.int64)
    for _ in range(num_steps):
        out = sampler.sample(logits, slot_ids)
        counts += np.bincount(out.token_ids, minlength=8)
        for slot_id, token_id in zip(slot_ids, out.token_ids):
            sampler.append_output(slot_id, [token_id])
    expected = reference_probs(LOGITS_8, **case)
    assert counts[expected == 0].sum() == 0
    assert chi_square_p_value(counts, expected) > 1e-3


def test_chi_square_detects_a_wrong_distribution():
    """Guards the guard: draws at temperature 1 must fail against the temperature-0.6 reference."""
    probs = processed_probs(torch.tensor([LOGITS_8]), torch.tensor([1.0]))
    draws = sample_from_probs(probs.expand(20000, -1), generator=torch.Generator().manual_seed(11))
    counts = np.bincount(draws.numpy(), minlength=8)
    assert chi_square_p_value(counts, reference_probs(LOGITS_8, temperature=0.6)) < 1e-6


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-400, 400), min_size=2, max_size=12, unique=True),
       temperature=st.floats(0.2, 3.0), top_k=st.integers(-1, 14), top_p=st.floats(0.05, 1.0),
       min_p=st.floats(0.0, 0.9))
def test_processed_probs_matches_reference_on_random_rows(values, temperature, top_k, top_p, min_p):
    logits = [v / 100.0 for v in values]
    expected = reference_probs(logits, temperature, top_k, top_p, min_p)
    # Skip rows that sit on a top_p or min_p boundary, where float32 and float64 may round apart.
    after_k = reference_probs(logits, temperature, top_k)
    cumulative = np.cumsum(np.sort(after_k)[::-1])
    assume(np.abs(cumulative - top_p).min() > 1e-4 or top_p == 1.0)
    after_p = reference_probs(logits, temperature, top_k, top_p)
    assume(np.abs(after_p[after_p > 0] - min_p * after_p.max()).min() > 1e-5 or min_p == 0.0)
    probs = processed_probs(torch.tensor([logits]), torch.tensor([temperature]), top_k=torch.tensor([top_k]),
                            top_p=torch.tensor([top_p]), min_p=torch.tensor([min_p]))
    np.testing.assert_allclose(probs[0].double().numpy(), expected, rtol=1e-4, atol=1e-6)


def test_top_k_without_sort_equals_the_sorted_path_including_ties():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(-3, 4, (16, 40), generator=gen).float()  # many ties at the k-th value
    top_k = torch.tensor([0, -1, 1, 2, 5, 7, 39, 40, 41, 3, 3, 10, 20, 1, 0, 6])
    fast = apply_top_k_top_p(logits, top_k, None)
    sorted_path = apply_top_k_top_p(logits, top_k, torch.ones(16))
    assert torch.equal(fast, sorted_path)
    kept = torch.isfinite(fast).sum(dim=-1)
    k = torch.where((top_k <= 0) | (top_k > 40), 40, top_k)
    assert bool((kept >= k).all())
    assert torch.equal(kept[top_k <= 0], torch.full((3,), 40))


def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p():
    # Probabilities [0.5, 0.25, 0.25] are exact in float32: token 0 alone reaches top_p = 0.5.
    logits = torch.tensor([[math.log(2.0), 0.0, 0.0]])
    probs = processed_probs(logits, torch.tensor([1.0]), top_p=torch.tensor([0.5]))
    assert probs[0].tolist() == [1.0, 0.0, 0.0]


def test_processed_probs_gives_greedy_rows_a_point_mass():
    logits = torch.tensor([LOGITS_8, LOGITS_8])
    probs = processed_probs(logits, torch.tensor([0.0, 1.0]), top_p=torch.tensor([0.5, 0.5]))
    assert torch.equal(probs[0], torch.nn.functional.one_hot(torch.tensor(1), 8).float())
    np.testing.assert_allclose(probs[1].numpy(), reference_probs(LOGITS_8, top_p=0.5), rtol=1e-5, atol=1e-7)


def test_zero_probability_tokens_are_never_drawn_even_with_zero_noise(monkeypatch):
    # Exp(1) noise of exactly 0 would make 0 / 0 = NaN, which argmax picks.
    monkeypatch.setattr(torch.Tensor, "exponential_", lambda self, generator=None: self.zero_())
    probs = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.3, 0.0, 0.7]])
    assert sample_from_probs(probs).tolist() == [2, 3]


# ---- penalties and min_tokens -------------------------------------------------------------------

def test_apply_penalties_follows_the_formula():
    logits = torch.tensor([[2.0, -1.0, 0.5, -0.5, 1.0, 3.0]])
    prompt_mask = torch.tensor([[True, True, False, False, False, False]])    # prompt: 0, 1
    output_counts = torch.tensor([[0, 0, 2, 1, 0, 0]], dtype=torch.int32)    # outputs: 2, 2, 3
    out = apply_penalties(logits, output_counts, prompt_mask, repetition_penalty=torch.tensor([2.0]),
                          presence_penalty=torch.tensor([0.5]), frequency_penalty=torch.tensor([0.25]))
    expected = [2.0 / 2, -1.0 * 2,
                0.5 / 2 - 0.25 * 2 - 0.5,
                -0.5 * 2 - 0.25 * 1 - 0.5,
                1.0, 3.0]
    assert out[0].tolist() == pytest.approx(expected, abs=1e-6)


def test_sampler_penalises_only_its_own_rows_and_tracks_appended_outputs():
    sampler = make_sampler(max_num_seqs=4, vocab_size=6)
    sampler.add_slot(0, SamplingParams(temperature=0.0, frequency_penalty=0.3), [5])
    sampler.add_slot(1, SamplingParams(temperature=0.0), [5])
    sampler.add_slot(2, SamplingParams(temperature=0.0, repetition_penalty=2.0), [4], output_token_ids=[3])
    logits = torch.tensor([[3.0, 2.9, 2.8, 0.0, 0.0, 0.0],
                           [3.0, 2.9, 2.8, 0.0, 0.0, 0.0],
                           [0.0, 0.0, 0.0, 2.0, 1.5, 1.2]])
    picks = []
    for _ in range(4):
        out = sampler.sample(logits, [0, 1, 2])
        picks.append(out.token_ids)
        for slot_id, token_id in zip([0, 1, 2], out.token_ids):
            sampler.append_output(slot_id, [token_id])
    # Slot 0: each pick costs 0.3 -> 0 (3.0), 1 (2.9 > 2.7), 2 (2.8 > 2.7, 2.6), 0 (2.7 > 2.6, 2.5).
    assert [p[0] for p in picks] == [0, 1, 2, 0]
    assert [p[1] for p in picks] == [0, 0, 0, 0]
    # Slot 2: 3 (resumed output) -> 1.0 and 4 (prompt) -> 0.75 fall below 5's 1.2; once 5 is seen
    # (0.6), 3 wins for good: repetition penalises seen tokens once, it does not compound.
    assert [p[2] for p in picks] == [5, 3, 3, 3]


def test_output_counts_include_resumed_outputs_and_repeats_within_one_append():
    sampler = make_sampler(max_num_seqs=2, vocab_size=5)
    sampler.add_slot(1, SamplingParams(temperature=0.0, frequency_penalty=1.0), [4], output_token_ids=[1, 1, 1])
    sampler.append_output(1, [2, 2])
    # After counts 1: 3 and 2: 2 -> [0.0, 0.4, 0.6, 0.55, 0.0]; any lost count makes 1 or 2 win big.
    out = sampler.sample(torch.tensor([[0.0, 3.4, 2.6, 0.55, 0.0]]), [1])
    assert out.token_ids == [2]


def test_min_tokens_masks_eos_and_stop_token_ids():
    sampler = make_sampler(max_num_seqs=4, vocab_size=10, eos_token_ids=[9])
    sampler.add_slot(0, SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=[8]), [1])
    sampler.add_slot(1, SamplingParams(temperature=0.0), [1])
    sampler.add_slot(2, SamplingParams(temperature=1.0, min_tokens=3, seed=0), [1])
    logits = torch.tensor([[0.0] * 7 + [1.0, 4.0, 5.0]] * 3)
    picks = []
    for _ in range(3):
        out = sampler.sample(logits, [0, 1, 2])
        picks.append(out.token_ids)
        for slot_id, token_id in zip([0, 1, 2], out.token_ids):
            sampler.append_output(slot_id, [token_id])
    assert [p[0] for p in picks] == [7, 7, 9]
    assert [p[1] for p in picks] == [9, 9, 9]
    assert all(p[2] != 9 for p in picks)   # only EOS is masked for slot 2; 8 is allowed


def test_min_tokens_masking_holds_across_many_sampled_draws():
    num_slots = 2000
    sampler = Sampler(num_slots, 10, [9], seed=1)
    for slot_id in range(num_slots):
        sampler.add_slot(slot_id, SamplingParams(min_tokens=1, stop_token_ids=[8]), [1])
    logits = torch.tensor([[0.0] * 8 + [3.0, 3.0]]).expand(num_slots, -1)
    out = sampler.sample(logits, list(range(num_slots)))
    assert max(out.token_ids) < 8


# ---- logprobs -----------------------------------------------------------------------------------

def test_logprobs_hold_the_sampled_and_top_n_ids_from_the_raw_logits():
    torch.manual_seed(5)
    vocab_size = 20
    sampler = make_sampler(max_num_seqs=4, vocab_size=vocab_size)
    sampler.add_slot(0, SamplingParams(temperature=0.5, logprobs=3, repetition_penalty=1.5, top_k=12), [0, 1])
    sampler.add_slot(1, SamplingParams(temperature=0.0, logprobs=0), [0])
    sampler.add_slot(2, SamplingParams(temperature=1.0), [0])
    sampler.add_slot(3, SamplingParams(temperature=2.0, logprobs=5), [0])
    for _ in range(5):
        logits = torch.randn(4, vocab_size)
        out = sampler.sample(logits, [3, 0, 2, 1])
        raw = torch.log_softmax(logits.double(), dim=-1)
        assert out.logprobs[2] is None
        for row, n in ((0, 5), (1, 3), (3, 0)):
            lp = out.logprobs[row]
            top_ids = raw[row].topk(n).indices.tolist() if n else []
            assert set(lp) == {out.token_ids[row], *top_ids}
            for token_id, value in lp.items():
                assert value == pytest.approx(float(raw[row, token_id]), abs=1e-5)
        for slot_id, token_id in zip([3, 0, 2, 1], out.token_ids):
            sampler.append_output(slot_id, [token_id])


# ---- errors -------------------------------------------------------------------------------------

def test_misuse_raises_with_a_clear_message():
    sampler = make_sampler(max_num_seqs=2)
    sampler.add_slot(0, SamplingParams(), [1])
    with pytest.raises(KeyError, match="slot 1 holds no request"):
        sampler.sample(torch.zeros(2, 8), [0, 1])
    with pytest.raises(ValueError, match="expected"):
        sampler.sample(torch.zeros(2, 8), [0])
    sampler.remove_slot(0)
    with pytest.raises(KeyError):
        sampler.append_output(0, [1])
