"""Prompts queued behind the verification steps in flight (--async-scheduling, Scheduler.schedule_prompts_ahead and
runner/planned_prompts.py): a request admitted while a verification step runs, and the next one is planned ahead of
it, gets its prompt as a step of its own right behind both, in a free slot neither holds, its first token sampled on
the device (a prompt in chunks: a step a chunk). Outputs equal stepping one step at a time (greedy, synthetic
drafts) on a dense model, an MoE and hybrid models; the checkpoints kept between chunks serve a later prompt; nothing
leaks; requests that need their history on the host to sample, an MTP head's drafts and
plain decoding keep the usual prompt step beside the windows, as every engine does without STRATA_PROMPTS_AHEAD=1.
Tiny random models, CPU (and CUDA graphs on a GPU)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from strata import SamplingParams
from strata.engine.core import EngineCore
from strata.types import Request
from strata.runner.model_runner import ModelRunner
from engine_driver import drive, greedy, prompt
from test_verify_ahead import assert_released, engine

MTP = {"method": "mtp", "num_speculative_tokens": 2}


@pytest.fixture(autouse=True)
def prompts_ahead(monkeypatch):
    monkeypatch.setenv("STRATA_PROMPTS_AHEAD", "1")  # opt-in until measured on a GPU


def staggered(count: int = 7) -> list[tuple[int, SamplingParams]]:
    """Requests of different lengths, all there from the start: with two running at a time each end admits the
    next while a step planned ahead is in flight."""
    return [(0, greedy(9 + 5 * (i % 4))) for i in range(count)]


def two_at_a_time(core):
    """(Engines here are built without an admission hold: a request is admitted as soon as a slot frees.) Two
    requests running of the 4 slots built (two free beside the step in flight), windows kept uniform as CUDA
    graphs take them (so steps go on being planned ahead up to a request's end)."""
    core.set_runtime_options(max_num_seqs=2)
    core.scheduler.uniform_draft_windows = True
    return core


def record_prompt_launches(monkeypatch) -> list[tuple[set[int], set[int], list[str]]]:
    """Per admission behind steps in flight: (the slots of those steps, the prompts' slots, the admitted request
    ids)."""
    calls = []
    launch = EngineCore._launch_prompts_behind

    def recorded(self, in_flight, deltas):
        queued = launch(self, in_flight, deltas)  # [(plan, launched, start)]: a step a chunk
        if queued:
            calls.append(({w.slot_id for plan in in_flight for w in plan.scheduled},
                          {w.slot_id for plan, _, _ in queued for w in plan.scheduled},
                          [new.request_id for new in queued[0][0].new_slots]))
        return queued

    monkeypatch.setattr(EngineCore, "_launch_prompts_behind", recorded)
    return calls


@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "qwen3_next", "qwen4_exp"])
def test_prompts_behind_synthetic_windows_equal_stepping(family, tiny_model_dir, monkeypatch):
    """Most admissions go behind the steps in flight, and the request whose prompt was read joins the chain with
    its first window (its tokens from the host, after the windows the step in flight feeds). On the hybrids these
    prompts (3-15 tokens, KV blocks of 4) run in two chunks, one step each (a checkpoint is kept where a chunk
    ends)."""
    folder = tiny_model_dir(family)
    requests = staggered()
    reference = drive(two_at_a_time(engine(folder, False, hold=0)), requests)
    launches = record_prompt_launches(monkeypatch)
    joined, launch = [], ModelRunner.launch_verify

    def recorded(self, plan, inputs_from=None):
        if inputs_from is not None:
            joined.append([w.slot_id for w in plan.scheduled if w.slot_id not in inputs_from.slot_ids])
        return launch(self, plan, inputs_from)

    monkeypatch.setattr(ModelRunner, "launch_verify", recorded)
    core = two_at_a_time(engine(folder, True, hold=0))
    assert drive(core, requests) == reference
    assert [len(reference[str(i)][0]) for i in range(7)] == [9 + 5 * (i % 4) for i in range(7)]
    assert len(launches) >= 3, launches
    admitted_slots = {slot for _, prompts, _ in launches for slot in prompts}
    assert {s for slots in joined for s in slots} <= admitted_slots
    assert sum(1 for slots in joined if slots) >= 3, joined
    assert_released(core)


@pytest.mark.parametrize("family", ["qwen3_next", "qwen4_exp"])
def test_hybrid_prompts_of_whole_blocks_join_the_chain(family, tiny_model_dir, monkeypatch):
    """Prompts of whole KV blocks run whole behind the steps in flight on a hybrid, and their requests join the
    next step planned ahead (their recurrent states then roll back with the others'): outputs as stepping."""
    folder = tiny_model_dir(family)
    prompts = [torch.randint(3, 160, (4 * (2 + i % 3),), generator=torch.Generator().manual_seed(i)).tolist()
               for i in range(6)]

    def run(core) -> dict[str, list[int]]:
        for i, ids in enumerate(prompts):
            core.add_request(Request(str(i), ids, greedy(9 + 4 * (i % 3))))
        out: dict[str, list[int]] = {}
        while core.has_unfinished():
            for delta in core.step():
                out[delta.request_id] = out.get(delta.request_id, []) + delta.new_token_ids
        return out

    reference = run(two_at_a_time(engine(folder, False, hold=0)))
    joined, launch = [], ModelRunner.launch_verify

    def recorded(self, plan, inputs_from=None):
        if inputs_from is not None:
            joined.extend(w.slot_id for w in plan.scheduled if w.slot_id not in inputs_from.slot_ids)
        return launch(self, plan, inputs_from)

    monkeypatch.setattr(ModelRunner, "launch_verify", recorded)
    core = two_at_a_time(engine(folder, True, hold=0))
    assert run(core) == reference
    assert len(joined) >= 3, joined
    assert_released(core)


@pytest.mark.parametrize("family", ["qwen3_next", "qwen4_exp"])
def test_checkpoints_between_chunks_queued_ahead_serve_a_later_prompt(family, tiny_model_dir, monkeypatch):
    """A hybrid's prompt queued ahead in chunks saves its state where each chunk ends, before the next chunk's
    forward: each prompt sent again afterwards finds those checkpoints (tokens from the cache) and gets the first
    token's log-probabilities of a cold engine, which computes the same chunks (no windows: one token)."""
    folder = tiny_model_dir(family)
    launches = record_prompt_launches(monkeypatch)
    core = two_at_a_time(engine(folder, True, hold=0))
    drive(core, staggered())
    admitted = [request_id for _, _, ids in launches for request_id in ids]
    assert len(admitted) >= 3, launches
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=5, ignore_eos=True)

    def first_token(runner_core, request_id: str) -> tuple[int, list, list]:
        runner_core.add_request(Request(request_id, prompt(int(request_id)), params))
        deltas = [d for _ in range(8) for d in runner_core.step() if d.new_token_ids]
        return deltas[0].num_cached_tokens, deltas[0].new_token_ids, deltas[0].new_logprobs

    cold = engine(folder, False, hold=0, speculative=None)
    for request_id in admitted:
        cached, tokens, logprobs = first_token(core, request_id)
        assert cached >= 4 and cached % 4 == 0, (request_id, cached)
        assert (tokens, logprobs) == first_token(cold, request_id)[1:]
    assert_released(core)


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["qwen3_next", "qwen4_exp"])
def test_cuda_prompts_behind_graph_windows_equal_stepping(family, tiny_model_dir, monkeypatch):
    """On CUDA (bf16, the windows replaying graphs) the prompts' step is eager behind a graph step in flight:
    outputs as stepping one at a time, which runs each prompt beside the running windows."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    folder = tiny_model_dir(family)
    requests = staggered()
    reference = drive(two_at_a_time(engine(folder, False, "cuda", hold=0)), requests)
    launches = record_prompt_launches(monkeypatch)
    core = two_at_a_time(engine(folder, True, "cuda", hold=0))
    assert core.runner.graphs is not None
    assert drive(core, requests) == reference
    assert len(launches) >= 3, launches
    assert_released(core)


def test_plain_decoding_admits_the_usual_way(tiny_model_dir, monkeypatch):
    """Plain decoding's steps ahead are decode steps, which admit in the usual step: outputs as stepping one at a
    time, no prompt queued behind a step."""
    folder = tiny_model_dir("qwen3_next")
    requests = staggered(6)
    reference = drive(two_at_a_time(engine(folder, False, speculative=None, hold=0)), requests)
    launches = record_prompt_launches(monkeypatch)
    core = two_at_a_time(engine(folder, True, speculative=None, hold=0))
    assert drive(core, requests) == reference
    assert not launches
    assert_released(core)


def test_prompts_ahead_keep_to_the_step_token_budget(tiny_model_dir, monkeypatch):
    """Several requests admitted behind the steps in flight at once share a step's token budget: no queued step
    carries more than max_num_batched_tokens, and outputs are stepping's."""
    folder = tiny_model_dir("llama")
    requests = [(0, greedy(6 + 9 * (i % 2))) for i in range(8)]
    launches = record_prompt_launches(monkeypatch)
    sizes, launch = [], ModelRunner.launch_prompts

    def recorded(self, plan):
        sizes.append(plan.num_tokens)
        return launch(self, plan)

    monkeypatch.setattr(ModelRunner, "launch_prompts", recorded)

    def small_budget(core):
        core.scheduler.config = dataclasses.replace(core.scheduler.config, max_num_batched_tokens=16)
        core.set_runtime_options(max_num_seqs=4)
        core.scheduler.uniform_draft_windows = True
        return core

    reference = drive(small_budget(engine(folder, False, hold=0)), requests)
    core = small_budget(engine(folder, True, hold=0))
    assert drive(core, requests) == reference
    assert launches and any(len(ids) > 1 for _, _, ids in launches) and max(sizes) <= 16, (launches, sizes)
    assert_released(core)


def test_off_without_the_switch(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("STRATA_PROMPTS_AHEAD")
    folder = tiny_model_dir("llama")
    launches = record_prompt_launches(monkeypatch)
    core = two_at_a_time(engine(folder, True, hold=0))
    assert drive(core, staggered(5)) == drive(two_at_a_time(engine(folder, False, hold=0)), staggered(5))
    assert not launches


def test_slots_held_by_a_step_in_flight_are_not_given_out(tiny_model_dir, monkeypatch):
    """The prompts' slots are never those of the steps in flight: not the one a request freed by ending while a
    step with its window was queued. With every slot built in use (max_num_seqs = 4) and with spare ones (2 of 4)."""
    folder = tiny_model_dir("llama")
    launches = record_prompt_launches(monkeypatch)
    requests = staggered(9)
    full, stepping = engine(folder, True, hold=0), engine(folder, False, hold=0)
    full.scheduler.uniform_draft_windows = stepping.scheduler.uniform_draft_windows = True
    assert drive(full, requests) == drive(stepping, requests)
    assert_released(full)
    two = drive(two_at_a_time(engine(folder, True, hold=0)), requests)
    assert two == drive(two_at_a_time(engine(folder, False, hold=0)), requests)
    assert len(launches) >= 4 and all(not (in_flight & prompts) for in_flight, prompts, _ in launches), launches


def test_history_sampling_and_mtp_keep_the_usual_prompt_step(tiny_model_dir, monkeypatch):
    """A waiting request with a repetition penalty (its first token needs the host's history) is admitted in the
    usual step, the one before it behind a step in flight; an MTP-drafting engine admits every request the usual way.
    Outputs as stepping one at a time."""
    folder = tiny_model_dir("qwen3_next")
    requests = [(0, greedy(12)), (0, greedy(24)), (0, greedy(5)), (0, greedy(15, repetition_penalty=1.3))]
    launches = record_prompt_launches(monkeypatch)
    reference = drive(two_at_a_time(engine(folder, False, hold=0)), requests)
    core = two_at_a_time(engine(folder, True, hold=0))
    assert drive(core, requests) == reference
    admitted = [request_id for _, _, ids in launches for request_id in ids]
    assert "2" in admitted and "3" not in admitted, launches
    assert_released(core)
    launches.clear()
    folder = tiny_model_dir("qwen3_next+mtp")
    reference = drive(two_at_a_time(engine(folder, False, speculative=MTP, hold=0)), staggered(5))
    core = two_at_a_time(engine(folder, True, speculative=MTP, hold=0))
    assert drive(core, staggered(5)) == reference
    assert not launches
    assert_released(core)
