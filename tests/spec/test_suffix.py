"""SuffixDrafter: exact proposals on handcrafted histories, and incremental extension equal to a
from-scratch build and to a brute-force scan (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.spec.suffix import SuffixDrafter


def propose(token_ids: list[int], k: int, max_ngram: int = 4, min_ngram: int = 1) -> list[int]:
    drafter = SuffixDrafter(max_ngram=max_ngram, min_ngram=min_ngram)
    drafter.add_slot(0, token_ids)
    return drafter.propose(0, k)


def brute_force_propose(token_ids: list[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The definition, as a scan: longest suffix first, most recent earlier start first."""
    end = len(token_ids)
    for n in range(min(max_ngram, end), min_ngram - 1, -1):
        for start in range(end - n - 1, -1, -1):
            if token_ids[start:start + n] == token_ids[end - n:]:
                return token_ids[start + n:start + n + k]
    return []


# ---- suffix: handcrafted ------------------------------------------------------------------------

def test_repeated_code_line_proposes_the_rest_of_the_line():
    # "for i in range ( n ) :" twice; the second copy stops after "range".
    line = [10, 11, 12, 13, 14, 15, 16, 17]
    assert propose(line + [99] + line[:4], k=3) == [14, 15, 16]
    assert propose(line + [99] + line[:4], k=10) == [14, 15, 16, 17, 99, 10, 11, 12, 13]


def test_no_match_proposes_nothing():
    assert propose([1, 2, 3, 4, 5], k=4) == []
    assert propose([], k=4) == []
    assert propose([7], k=4) == []
    assert propose([1, 2, 1, 2], k=0) == []


def test_match_near_the_end_gives_fewer_than_k():
    assert propose([5, 6, 7, 5, 6], k=4) == [7, 5, 6]
    # overlapping: the latest earlier (1, 1, 1) starts at 0 and only one token follows it.
    assert propose([1, 1, 1, 1], k=5) == [1]


def test_overlapping_matches_use_the_overlap():
    # suffix (2, 3, 2, 3) occurs earlier at 1, overlapping the suffix itself at 3..6
    assert propose([1, 2, 3, 2, 3, 2, 3], k=3) == [2, 3]


def test_most_recent_earlier_occurrence_is_preferred():
    # (4, 5) is followed by 6 at first and by 8 later: the later one wins.
    assert propose([4, 5, 6, 0, 4, 5, 8, 0, 4, 5], k=1, max_ngram=2) == [8]
    assert propose([4, 5, 6, 0, 4, 5, 8, 0, 4, 5], k=2, max_ngram=4) == [8, 0]


def test_longest_ngram_is_preferred_over_a_more_recent_shorter_one():
    # suffix (1, 2, 3): the 3-gram matched at 0 (-> 50) beats the later 1-gram "3" (-> 60).
    tokens = [1, 2, 3, 50, 9, 3, 60, 7, 1, 2, 3]
    assert propose(tokens, k=1) == [50]
    assert propose(tokens, k=1, max_ngram=1) == [60]
    # min_ngram excludes the short matches: (8, 3) never occurred before, and 1-grams are off.
    assert propose([3, 4, 9, 8, 3], k=2, min_ngram=2) == []
    assert propose([3, 4, 9, 8, 3], k=2, min_ngram=1) == [4, 9]


def test_extend_and_remove_slot():
    drafter = SuffixDrafter()
    drafter.add_slot(3, [1, 2, 3, 1, 2])
    drafter.add_slot(4, [9, 9])
    assert drafter.propose(3, 2) == [3, 1]
    drafter.extend(3, [3])
    assert drafter.propose(3, 2) == [1, 2]
    assert drafter.propose(4, 2) == [9]
    drafter.remove_slot(3)
    with pytest.raises(KeyError, match="slot 3"):
        drafter.propose(3, 2)
    with pytest.raises(ValueError):
        SuffixDrafter(max_ngram=2, min_ngram=3)


# ---- suffix: properties -------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(token_ids=st.lists(st.integers(0, 3), max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=5),
       ngrams=st.sampled_from([(4, 1), (3, 2), (1, 1), (5, 3)]),
       k=st.integers(0, 6))
def test_incremental_extend_equals_build_from_scratch_and_brute_force(token_ids, cuts, ngrams, k):
    max_ngram, min_ngram = ngrams
    incremental = SuffixDrafter(max_ngram, min_ngram)
    bounds = sorted({0, len(token_ids), *(c for c in cuts if c <= len(token_ids))})
    incremental.add_slot(0, token_ids[:bounds[1]] if len(bounds) > 1 else [])
    for lo, hi in zip(bounds[1:], bounds[2:]):
        incremental.extend(0, token_ids[lo:hi])
        prefix = token_ids[:hi]
        assert incremental.propose(0, k) == brute_force_propose(prefix, k, max_ngram, min_ngram)
    expected = brute_force_propose(token_ids, k, max_ngram, min_ngram)
    assert incremental.propose(0, k) == expected
    assert propose(token_ids, k, max_ngram, min_ngram) == expected


def test_proposing_after_pending_drafts():
    """Drafts in flight taken as if committed: the suffix ending in them is matched in the history, the
    continuation runs on through the history into them, and nothing is indexed."""
    drafter = SuffixDrafter(max_ngram=3)
    drafter.add_slot(0, [1, 2, 3, 4, 5, 1, 2])
    assert drafter.propose(0, 4) == [3, 4, 5, 1]              # "1 2" matched at 0
    assert drafter.propose(0, 4, pending=[3]) == [4, 5, 1, 2]  # "1 2 3" matched at 0
    assert drafter.propose(0, 8, pending=[3]) == [4, 5, 1, 2, 3]  # runs on into the pending token
    assert drafter.propose(0, 3, pending=[9]) == []            # "9" never seen
    assert drafter.propose(0, 4) == [3, 4, 5, 1]              # the index is as before
