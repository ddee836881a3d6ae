"""Prompts queued behind a step in flight (--async-scheduling, Scheduler.schedule_prompts_ahead and
runner/planned_prompts.py): a request admitted while a planned-ahead step runs gets its prompt as a step of its own
right behind that step, in a free slot the step does not hold, its first token sampled on the device. Outputs equal
stepping one step at a time (greedy; synthetic and suffix drafts, plain decoding) on a dense model, an MoE and
hybrid models; nothing leaks; requests that need their history on the host to sample, or an MTP head's drafts, keep
the usual prompt step beside the windows. Tiny random models, CPU."""

from __future__ import annotations

import pytest
import torch

from strata import SamplingParams
from strata.engine.core import EngineCore
from engine_driver import drive, greedy
from test_verify_ahead import assert_released, engine

SUFFIX = {"method": "suffix", "num_speculative_tokens": 3}
MTP = {"method": "mtp", "num_speculative_tokens": 2}


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
    """Per prompt step queued behind a step in flight: (the slots of the step in flight, the prompts' slots, the
    admitted request ids)."""
    calls = []
    launch = EngineCore._launch_prompts_behind

    def recorded(self, plan, deltas):
        queued = launch(self, plan, deltas)
        if queued is not None:
            calls.append(({w.slot_id for w in plan.scheduled}, {w.slot_id for w in queued[0].scheduled},
                          [new.request_id for new in queued[0].new_slots]))
        return queued

    monkeypatch.setattr(EngineCore, "_launch_prompts_behind", recorded)
    return calls


@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "qwen3_next", "qwen4_exp"])
def test_prompts_behind_synthetic_windows_equal_stepping(family, tiny_model_dir, monkeypatch):
    folder = tiny_model_dir(family)
    requests = staggered()
    reference = drive(two_at_a_time(engine(folder, False, hold=0)), requests)
    launches = record_prompt_launches(monkeypatch)
    core = two_at_a_time(engine(folder, True, hold=0))
    assert drive(core, requests) == reference
    assert [len(reference[str(i)][0]) for i in range(7)] == [9 + 5 * (i % 4) for i in range(7)]
    assert len(launches) >= 3, launches  # most admissions went behind a step in flight
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


@pytest.mark.parametrize("speculative", [None, SUFFIX], ids=["plain", "suffix"])
def test_prompts_behind_decode_and_suffix_steps_equal_stepping(speculative, tiny_model_dir, monkeypatch):
    folder = tiny_model_dir("qwen3_next")
    requests = staggered(6)
    reference = drive(two_at_a_time(engine(folder, False, speculative=speculative, hold=0)), requests)
    launches = record_prompt_launches(monkeypatch)
    core = two_at_a_time(engine(folder, True, speculative=speculative, hold=0))
    assert drive(core, requests) == reference
    assert launches, "no prompt went behind a step in flight"
    assert_released(core)


def test_slots_held_by_the_step_in_flight_are_not_given_out(tiny_model_dir, monkeypatch):
    """With only the freed slot outside the running requests' (max_num_seqs = the slots built) that slot is still
    in the step in flight (the request that freed it ended in the step before): no prompt goes behind it. With
    spare slots, the prompts' slots are never the step in flight's."""
    folder = tiny_model_dir("llama")
    launches = record_prompt_launches(monkeypatch)
    full, stepping = engine(folder, True, hold=0), engine(folder, False, hold=0)
    full.scheduler.uniform_draft_windows = stepping.scheduler.uniform_draft_windows = True
    requests = staggered(9)
    assert drive(full, requests) == drive(stepping, requests)
    assert not launches
    two = drive(two_at_a_time(engine(folder, True, hold=0)), requests)
    assert two == drive(two_at_a_time(engine(folder, False, hold=0)), requests)
    assert launches and all(not (in_flight & prompts) for in_flight, prompts, _ in launches), launches


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
