"""The scheduler without a model: token budget, chunked prompts, continuous batching, preemption,
and its invariants under random workloads (hypothesis)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.cache.block_allocator import BlockAllocator, blocks_needed
from strata.config import CacheConfig, SchedulerConfig
from strata.scheduler.scheduler import Scheduler
from strata.types import FinishReason, Request, SamplingParams, SlotResult, StepResult

EOS = 0


def make_scheduler(max_num_seqs=4, budget=32, num_blocks=64, block_size=4, max_model_len=256, policy="fcfs",
                   admission_hold_steps=0):
    return Scheduler(SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, policy=policy,
                                     admission_hold_steps=admission_hold_steps),
                     CacheConfig(block_size=block_size), num_blocks, max_model_len, (EOS,))


def request(rid: str, prompt_len: int, max_tokens: int = 4) -> Request:
    return Request(rid, list(range(1, prompt_len + 1)), SamplingParams(temperature=0, max_tokens=max_tokens))


def check_ownership(s: Scheduler) -> None:
    """Shared prefix blocks are fine; a block's reference count equals its number of holders, and
    every block is either held or free for reuse, never both."""
    holders = Counter(b for state in s.running for b in state.block_ids)
    for block_id, count in holders.items():
        assert s.allocator.ref_count(block_id) == count
    assert s.allocator.num_free + len(holders) == s.allocator.num_blocks


def fake_execute(plan, token: int = 7) -> StepResult:
    """A runner stand-in: every slot that reached its end samples `token`."""
    return StepResult(plan.step_id, [SlotResult(w.slot_id, [token]) for w in plan.scheduled if w.sample])


def test_long_prompt_is_chunked_while_others_decode():
    s = make_scheduler(budget=16)
    s.add_request(request("short", 3, max_tokens=10))
    s.update(plan := s.schedule(), fake_execute(plan))
    s.add_request(request("long", 40))
    chunks = []
    for _ in range(4):
        plan = s.schedule()
        by_slot = {w.slot_id: w for w in plan.scheduled}
        assert plan.num_tokens <= 16
        assert by_slot[0].num_new_tokens == 1  # the short request keeps decoding every step
        chunks.append(by_slot[1].num_new_tokens)
        s.update(plan, fake_execute(plan))
    assert chunks == [15, 15, 10, 1]
    assert s.requests["long"].output_token_ids == [7, 7]


def test_requests_join_and_leave_between_steps():
    s = make_scheduler(max_num_seqs=2)
    for i in range(3):
        s.add_request(request(f"r{i}", 2, max_tokens=2))
    plan = s.schedule()
    assert [n.request_id for n in plan.new_slots] == ["r0", "r1"]
    s.update(plan, fake_execute(plan))
    plan = s.schedule()
    s.update(plan, fake_execute(plan))          # r0, r1 reach max_tokens and leave
    plan = s.schedule()
    assert sorted(plan.finished_slot_ids) == [0, 1]
    assert [n.request_id for n in plan.new_slots] == ["r2"]


def test_eos_and_stop_token_ids_finish():
    s = make_scheduler()
    s.add_request(Request("a", [1, 2], SamplingParams(temperature=0, max_tokens=50, stop_token_ids=[9])))
    s.add_request(request("b", 2, max_tokens=50))
    plan = s.schedule()
    result = StepResult(plan.step_id, [SlotResult(0, [9]), SlotResult(1, [EOS])])
    commits = s.update(plan, result)
    assert [c.finish_reason for c in commits] == [FinishReason.STOP, FinishReason.STOP]
    assert not s.has_unfinished()


def test_shortest_prompt_first():
    s = make_scheduler(max_num_seqs=1, policy="shortest-prompt-first")
    s.add_request(request("long", 20))
    s.add_request(request("short", 2))
    assert s.schedule().new_slots[0].request_id == "short"


def _admissions(hold: int, max_tokens: list[int], steps: int = 30) -> tuple[list[list[str]], dict[str, list[int]]]:
    """Two slots, the requests all waiting from the start: the request ids each step admitted, and the outputs."""
    s = make_scheduler(max_num_seqs=2, admission_hold_steps=hold)
    for i, n in enumerate(max_tokens):
        s.add_request(request(f"r{i}", 3, max_tokens=n))
    admitted, outputs = [], {}
    for _ in range(steps):
        plan = s.schedule()
        admitted.append([new.request_id for new in plan.new_slots])
        for commit in s.update(plan, fake_execute(plan)):
            if commit.finish_reason:
                outputs[commit.state.request_id] = commit.state.output_token_ids
        check_ownership(s)
    assert not s.has_unfinished()
    return [ids for ids in admitted if ids], outputs


def test_admission_hold_joins_the_prompts_of_slots_freeing_a_step_apart():
    """r0 ends a step before r1: held, r2's prompt waits that step and enters beside r3's, in one prompt step."""
    held_groups, held_outputs = _admissions(2, [2, 3, 4, 4])
    plain_groups, plain_outputs = _admissions(0, [2, 3, 4, 4])
    assert plain_groups == [["r0", "r1"], ["r2"], ["r3"]]
    assert held_groups == [["r0", "r1"], ["r2", "r3"]]
    assert held_outputs == plain_outputs and len(held_outputs) == 4


def test_admission_hold_waits_only_for_a_slot_that_frees_within_it():
    """r1 ends 2 steps after r0: a hold of 1 step admits r2 at once, as does any hold while r1 runs long; a hold of
    2 waits for r1."""
    assert _admissions(1, [2, 4, 4, 4])[0] == [["r0", "r1"], ["r2"], ["r3"]]
    assert _admissions(3, [2, 40, 4, 4], steps=60)[0] == [["r0", "r1"], ["r2"], ["r3"]]
    assert _admissions(2, [2, 4, 4, 4])[0] == [["r0", "r1"], ["r2", "r3"]]


def test_admission_after_a_hold_fills_every_free_slot():
    """Held 2 steps for r0's end, r1 and r2 then enter together, though rA too ends within 2 steps by then."""
    s = make_scheduler(max_num_seqs=4, admission_hold_steps=2)
    s.add_request(request("r0", 3, max_tokens=4))
    s.add_request(request("rA", 3, max_tokens=6))
    admitted = []
    for step in range(5):
        if step == 2:
            s.add_request(request("r1", 3))
            s.add_request(request("r2", 3))
        plan = s.schedule()
        admitted.append([new.request_id for new in plan.new_slots])
        s.update(plan, fake_execute(plan))
    assert admitted == [["r0", "rA"], [], [], [], ["r1", "r2"]]


def test_admission_hold_never_idles_the_device_and_must_not_be_negative():
    s = make_scheduler(max_num_seqs=2, admission_hold_steps=5)
    s.add_request(request("a", 3, max_tokens=1))
    assert [new.request_id for new in s.schedule().new_slots] == ["a"]  # nothing runs: admitted at once
    with pytest.raises(ValueError, match="admission_hold_steps"):
        SchedulerConfig(admission_hold_steps=-1)


def test_preemption_keeps_output_and_resumes():
    # 2 blocks of 4 tokens: two requests cannot both grow past 4 tokens
    s = make_scheduler(max_num_seqs=2, num_blocks=3, block_size=4, budget=64)
    s.add_request(request("a", 3, max_tokens=4))
    s.add_request(request("b", 3, max_tokens=4))
    finished = {}
    for _ in range(40):
        plan = s.schedule()
        for c in s.update(plan, fake_execute(plan)):
            if c.finish_reason:
                finished[c.state.request_id] = c.state
        if not s.has_unfinished():
            break
    assert set(finished) == {"a", "b"}
    assert all(st.output_token_ids == [7] * 4 for st in finished.values())
    assert any(st.num_preemptions > 0 for st in finished.values())
    assert s.allocator.num_free == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.integers(1, 6), st.integers(0, 3)), min_size=1, max_size=10),
       st.integers(2, 12), st.integers(1, 4))
def test_invariants_under_random_workloads(reqs, num_blocks, max_num_seqs):
    """Random prompts, arrival steps and aborts: every request ends, blocks are never double-owned,
    each running request holds exactly the blocks its computed tokens need, and all blocks return."""
    s = make_scheduler(max_num_seqs=max_num_seqs, num_blocks=num_blocks + 8, block_size=4, budget=24)
    pending = [(arrive, request(f"r{i}", min(p, 4 * (num_blocks + 8) - 8), m))
               for i, (p, m, arrive) in enumerate(reqs)]
    for step in range(400):
        for arrive, req in [x for x in pending if x[0] == step]:
            s.add_request(req)
        plan = s.schedule()
        assert plan.num_tokens <= 24
        check_ownership(s)
        for work in plan.scheduled:
            st_ = next(r for r in s.running if r.slot_id == work.slot_id)
            assert len(st_.block_ids) == blocks_needed(work.num_computed_tokens + work.num_new_tokens, 4)
        if step == 3 and s.running:
            s.finish_request(s.running[0].request_id, FinishReason.ABORT)
        s.update(plan, fake_execute(plan))
        if not s.has_unfinished() and step > 3:
            break
    assert not s.has_unfinished()
    assert s.allocator.num_free == s.allocator.num_blocks


def test_allocator_refuses_double_free():
    a = BlockAllocator(2)
    ids = a.allocate(2)
    assert not a.can_allocate(1)
    a.free(ids)
    try:
        a.free(ids[:1])
    except RuntimeError as e:
        assert "not allocated" in str(e)
    else:
        raise AssertionError("double free was accepted")


def spec_scheduler(num_blocks: int, max_num_seqs: int, k: int, uses_mtp: bool):
    from strata.config import SpecConfig
    from strata.spec.planner import DraftPlanner

    spec = SpecConfig(method="mtp" if uses_mtp else "suffix", num_speculative_tokens=k)
    return Scheduler(SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=24),
                     CacheConfig(block_size=4), num_blocks, 256, (EOS,), DraftPlanner(spec))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.integers(1, 12), st.integers(0, 6)), min_size=1, max_size=8),
       st.integers(4, 20), st.integers(1, 4), st.integers(1, 4), st.booleans(), st.randoms(use_true_random=False))
def test_spec_invariants_under_random_acceptance(reqs, num_blocks, max_num_seqs, k, uses_mtp, rng):
    """Random drafts accepted in random numbers, arrivals, aborts (waiting, mid-prompt, mid-verify)
    and preemption: lengths only advance by accepted + 1, blocks are never shared, every request
    ends with exactly max_tokens outputs unless aborted, and every block and slot comes back."""
    s = spec_scheduler(num_blocks + 16, max_num_seqs, k, uses_mtp)
    pending = [(arrive, request(f"r{i}", p, m)) for i, (p, m, arrive) in enumerate(reqs)]
    aborted, finished = set(), {}
    mirror: dict[int, list[int]] = {}  # the runner's view of block tables, rebuilt from plans only
    for step in range(600):
        for arrive, req in [x for x in pending if x[0] == step]:
            s.add_request(req)
        plan = s.schedule()
        for slot_id in plan.finished_slot_ids:
            mirror.pop(slot_id, None)
        for new in plan.new_slots:
            mirror[new.slot_id] = list(new.cached_block_ids)
        for slot_id, num_blocks in plan.truncated_block_tables.items():
            del mirror[slot_id][num_blocks:]
        for w in plan.scheduled:
            mirror[w.slot_id] += w.new_block_ids
        for st_ in s.running:
            assert mirror[st_.slot_id] == st_.block_ids
        check_ownership(s)
        if rng.random() < 0.05 and s.requests:
            victim = rng.choice(sorted(s.requests))  # waiting, mid-prompt or mid-verify
            s.finish_request(victim, FinishReason.ABORT)
            aborted.add(victim)
        results = []
        for w in plan.scheduled:
            if w.sample:
                accepted = rng.randint(0, len(w.draft_token_ids))
                drafts = [rng.randint(1, 50) for _ in range(w.next_k)]
                results.append(SlotResult(w.slot_id, [7] * (accepted + 1), accepted, drafts))
        for c in s.update(plan, StepResult(plan.step_id, results)):
            assert c.state.num_computed_tokens <= c.state.num_tokens
            if c.finish_reason:
                finished[c.state.request_id] = c.state
        if not s.has_unfinished() and step > max(a for a, _ in pending):
            break
    assert not s.has_unfinished()
    for rid, state in finished.items():
        assert len(state.output_token_ids) == state.request.sampling_params.max_tokens
    assert set(finished) | aborted == {r.request_id for _, r in pending}
    assert s.allocator.num_free == s.allocator.num_blocks
    assert sorted(s.free_slots) == list(range(max_num_seqs))
