"""Prefix pinning and the opt-out from cache insertion, on the scheduler without a model: a pinned
prompt survives eviction pressure that evicts an unpinned one, until a request unpins it or its time to
live passes; the bound on pinned blocks; a request with cache_prefix False adds nothing to the cache;
reference counts stay exact under random pin / unpin / pressure sequences (hypothesis)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.config import CacheConfig, SchedulerConfig
from strata.scheduler.scheduler import Scheduler
from strata.types import Request, SamplingParams, SlotResult, StepResult

BLOCK = 4


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def make(num_blocks: int = 24, hybrid: bool = False, **cache) -> tuple[Scheduler, Clock]:
    s = Scheduler(SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=64),
                  CacheConfig(block_size=BLOCK, **cache), num_blocks, 256, (0,), has_recurrent_state=hybrid)
    clock = Clock()
    s.prefix.pins.clock = clock
    return s, clock


def run(s: Scheduler, rid: str, prompt: list[int], **fields) -> int:
    """One request to its end (2 output tokens) -> its prompt tokens found in the cache."""
    s.add_request(Request(rid, prompt, SamplingParams(temperature=0, max_tokens=2), **fields))
    state = s.requests[rid]
    while rid in s.requests:
        plan = s.schedule()
        s.update(plan, StepResult(plan.step_id, [SlotResult(w.slot_id, [7]) for w in plan.scheduled if w.sample]))
    return state.num_cached_tokens


def prompt(seed: int, n: int = 21) -> list[int]:
    return [1000 * seed + i for i in range(1, n + 1)]


def check_ref_counts(s: Scheduler) -> None:
    """Every block's count is its running holders plus one for a pin."""
    holders = Counter(b for state in s.running for b in state.block_ids)
    holders.update(block_id for block_id, _ in s.prefix.pins._pinned.values())
    for block_id in range(s.allocator.num_blocks):
        assert s.allocator.ref_count(block_id) == holders[block_id]


def test_pinned_prefix_survives_pressure_that_evicts_an_unpinned_one():
    s, _ = make()
    assert run(s, "pin", prompt(1), pin_prefix=True) == 0
    assert run(s, "plain", prompt(2)) == 0
    assert len(s.prefix.pins) == 5                       # 21 tokens: 5 full blocks
    for i in range(3, 9):                                # pressure: 6 more prompts through a 24-block pool
        run(s, f"other{i}", prompt(i))
    assert run(s, "pin-again", prompt(1)) == 20          # all but the last token: every full block
    assert run(s, "plain-again", prompt(2)) == 0         # evicted
    check_ref_counts(s)


def test_pin_false_unpins_and_the_time_to_live_expires_pins():
    s, clock = make(pin_ttl_s=60.0)
    run(s, "pin", prompt(1), pin_prefix=True)
    run(s, "unpin", prompt(1), pin_prefix=False)
    assert len(s.prefix.pins) == 0
    run(s, "pin2", prompt(2), pin_prefix=True)
    clock.now = 59.0
    run(s, "refresh", prompt(2), pin_prefix=True)        # a second pin moves the expiry on
    clock.now = 100.0
    s.schedule()
    assert len(s.prefix.pins) == 5
    clock.now = 120.0
    s.schedule()
    assert len(s.prefix.pins) == 0
    check_ref_counts(s)
    for i in range(3, 9):
        run(s, f"other{i}", prompt(i))
    assert run(s, "gone", prompt(2)) == 0


def test_pins_are_bounded_by_pin_max_tokens():
    s, _ = make(pin_max_tokens=7 * BLOCK)
    run(s, "a", prompt(1), pin_prefix=True)
    run(s, "b", prompt(2), pin_prefix=True)              # only 2 of its 5 blocks fit
    assert len(s.prefix.pins) == 7
    for i in range(3, 9):
        run(s, f"other{i}", prompt(i))
    assert run(s, "a-again", prompt(1)) == 20
    assert run(s, "b-again", prompt(2)) == 2 * BLOCK


def test_hybrid_pinned_prefix_keeps_its_checkpoint():
    """A hybrid model's prefix hit needs the recurrent-state checkpoint where it ends: with room for two
    checkpoints, the other requests' saves evict around the pinned prompt's, never it."""
    s, _ = make(hybrid=True, checkpoint_pool_size=2)
    run(s, "pin", prompt(1), pin_prefix=True)
    for i in range(2, 8):
        run(s, f"other{i}", prompt(i))
    assert run(s, "other2-again", prompt(2)) == 0        # its blocks and checkpoints are long gone
    assert run(s, "pin-again", prompt(1)) == 20
    s.prefix.pins.unpin(list(s.prefix.pins._pinned))
    assert not s.checkpoints.pinned
    check_ref_counts(s)


def test_cache_prefix_false_adds_nothing_but_still_reads():
    s, _ = make()
    run(s, "out", prompt(1), cache_prefix=False)
    assert s.allocator.num_cached == 0
    assert run(s, "in", prompt(1)) == 0                  # nothing was inserted
    assert run(s, "out-reads", prompt(1), cache_prefix=False) == 20
    run(s, "out-pin", prompt(3), cache_prefix=False, pin_prefix=True)
    assert len(s.prefix.pins) == 0                       # nothing cached, so nothing to pin


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([None, True, False])), min_size=1, max_size=25))
def test_ref_counts_stay_exact_under_random_pins(ops):
    s, clock = make(num_blocks=20, pin_max_tokens=9 * BLOCK, pin_ttl_s=5.0)
    for i, (seed, pin) in enumerate(ops):
        clock.now += 1.0
        run(s, f"r{i}", prompt(seed, 9 + 4 * seed), pin_prefix=pin)
        check_ref_counts(s)
        assert len(s.prefix.pins) <= 9
        assert s.allocator.num_free + len(s.prefix.pins) == s.allocator.num_blocks
