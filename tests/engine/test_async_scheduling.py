"""--async-scheduling (the next decode step planned and queued while the current one runs, its input
tokens fed on the device): outputs identical to plain stepping (greedy and sampled), requests ending
at any step (max_tokens, stop ids, aborts mid-flight) lose nothing and leak nothing, steps the
scheduler cannot plan ahead (penalties, logprobs, a waiting request with a free slot, no free block) fall
back, requests queued for a slot do not stop it, and a speculating engine plans ahead the steps where no
request drafts."""

from __future__ import annotations

import pytest
import torch

from strata import SamplingParams
from strata.config import CacheConfig, EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.cache.pools import CheckpointPool, HostParkPool
from strata.engine.core import EngineCore
from strata.runner.model_runner import ModelRunner
from engine_driver import count_launches, drive, greedy, prompt, turn


def engine(folder: str, async_scheduling: bool, block_size: int = 4, num_blocks: int | None = None,
           max_model_len: int | None = None, speculative: dict | None = None) -> EngineCore:
    config = EngineConfig(model=folder, runner=RunnerConfig(device="cpu", dtype="float32"),
                          cache=CacheConfig(block_size=block_size, num_gpu_blocks=num_blocks),
                          scheduler=SchedulerConfig(max_num_seqs=4, async_scheduling=async_scheduling,
                                                    max_model_len=max_model_len),
                          speculative=SpecConfig.from_json(speculative))
    return EngineCore(config, quiet=True)


@pytest.mark.parametrize("family", ["qwen3_moe", "llama", "qwen3_next"])
def test_greedy_outputs_identical_with_requests_ending_at_every_step(family, tiny_model_dir, monkeypatch):
    folder = tiny_model_dir(family)
    requests = [(0, greedy(1)), (0, greedy(2)), (0, greedy(9)), (0, greedy(17)), (12, greedy(5)), (13, greedy(8))]
    reference = drive(engine(folder, False), requests)
    ahead = count_launches(monkeypatch, "launch_decode")
    core = engine(folder, True)
    assert drive(core, requests) == reference
    # most decode steps were queued behind the previous one (a hybrid model's block ends included)
    assert sum(ahead) > 10
    assert core.scheduler.allocator.num_free == core.scheduler.allocator.num_blocks
    assert sorted(core.scheduler.free_slots) == list(range(4))


def test_stop_ids_and_an_abort_while_the_next_step_is_queued(tiny_model_dir, monkeypatch):
    folder = tiny_model_dir("qwen3_moe")
    plain = drive(engine(folder, False), [(0, greedy(12))])["0"][0]
    stop_at = plain[6]  # the token at step 6 stops the request (after the steps before it had queued the next)
    requests = [(0, greedy(12, stop_token_ids=[stop_at])), (0, greedy(20)), (0, greedy(20)), (0, greedy(20))]
    reference = drive(engine(folder, False), requests, abort={9: "2"})
    ahead = count_launches(monkeypatch, "launch_decode")
    core = engine(folder, True)
    got = drive(core, requests, abort={9: "2"})
    assert got == reference and sum(ahead) > 5
    assert ahead.count(False) == 1, ahead  # the stop and the abort leave their slots out: the chain goes on
    assert got["0"][0][-1] == stop_at and got["0"][0] == plain[:plain.index(stop_at) + 1]
    assert core.scheduler.allocator.num_free == core.scheduler.allocator.num_blocks


def test_sampled_outputs_identical(tiny_model_dir):
    """Unseeded draws depend on how rows are batched, so the requests share every step here: then the
    draws come in the same order and the fed tokens are the sampled ones."""
    folder = tiny_model_dir("qwen3_moe")
    params = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=16, ignore_eos=True)
    requests = [(0, params), (0, params), (0, params)]
    assert drive(engine(folder, True), requests) == drive(engine(folder, False), requests)


def test_steps_that_cannot_be_planned_ahead_fall_back(tiny_model_dir, monkeypatch):
    """Penalties and logprobs need the previous token on the host; a pool with no spare block cannot
    grow a request ahead: those steps run one at a time, with the same outputs."""
    folder = tiny_model_dir("qwen3_moe")
    requests = [(0, greedy(10, repetition_penalty=1.3)), (0, greedy(10, logprobs=2)), (0, greedy(10))]
    reference = drive(engine(folder, False), requests)
    ahead = count_launches(monkeypatch, "launch_decode")
    got = drive(engine(folder, True), requests)
    assert got == reference and not any(ahead)
    assert all(len(lp) == 10 for lp in [got["1"][2]])
    tight = [(0, greedy(16))]  # 3 + 16 tokens in blocks of 4: 5 blocks, and the pool has exactly 5
    ahead.clear()
    got = drive(engine(folder, True, num_blocks=5, max_model_len=20), tight)
    assert got == drive(engine(folder, False, max_model_len=20), tight)
    assert any(ahead) and not all(ahead)


def test_requests_queued_for_a_slot_do_not_stop_steps_ahead(tiny_model_dir, monkeypatch):
    """Six requests on four slots: while two wait for a slot, decode steps are still planned ahead (a slot freed in
    the step in flight takes its request a step later); outputs as plain stepping, everything released."""
    folder = tiny_model_dir("qwen3_next")
    requests = [(0, greedy(n)) for n in (14, 9, 17, 12, 10, 6)]
    reference = drive(engine(folder, False), requests)
    core = engine(folder, True)
    launches, launch = [], core.runner.launch_decode

    def recorded(plan, inputs_from=None):
        launches.append((inputs_from is not None, bool(core.scheduler.waiting)))
        return launch(plan, inputs_from)

    monkeypatch.setattr(core.runner, "launch_decode", recorded)
    assert drive(core, requests) == reference
    assert (True, True) in launches, launches
    assert core.scheduler.allocator.num_free == core.scheduler.allocator.num_blocks
    assert sorted(core.scheduler.free_slots) == list(range(4))


@pytest.mark.parametrize("family, speculative", [
    ("qwen3_moe", {"method": "synthetic", "num_speculative_tokens": 3, "acceptance_length": 1.0}),
    ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 2})])
def test_speculating_requests_that_draft_nothing_decode_ahead(family, speculative, tiny_model_dir, monkeypatch):
    """Drafts that are always rejected (synthetic acceptance 1.0; a random MTP head) turn drafting off
    (k = 0): those steps are plain decoding and are planned ahead. Outputs stay those of plain decoding.
    (How drafting is retried later is the policy's: tests/spec/test_policy.py.)"""
    folder = tiny_model_dir(family)
    requests = [(0, greedy(40)), (0, greedy(33)), (2, greedy(45))]
    reference = drive(engine(folder, False), requests)
    ahead = count_launches(monkeypatch, "launch_decode")
    core = engine(folder, True, speculative=speculative)
    assert drive(core, requests) == reference
    assert sum(ahead) >= 10 and core.scheduler.stats.num_draft_tokens > 0


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next"])
def test_cuda_graph_steps_fed_on_the_device_match_plain_stepping(family, tiny_model_dir, monkeypatch):
    """On CUDA the next step's input ids come from the device (into the graph inputs after their
    copy) and tokens are read back through an event, so the host never waits for the queued step."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")

    def cuda_engine(async_scheduling: bool) -> EngineCore:
        config = EngineConfig(model=tiny_model_dir(family), runner=RunnerConfig(device="cuda", dtype="bfloat16"),
                              scheduler=SchedulerConfig(max_num_seqs=4, async_scheduling=async_scheduling))
        return EngineCore(config, quiet=True)

    requests = [(0, greedy(3)), (0, greedy(24)), (0, greedy(24)), (0, greedy(11)), (30, greedy(6))]
    reference = drive(cuda_engine(False), requests)
    ahead = count_launches(monkeypatch, "launch_decode")
    core = cuda_engine(True)
    assert core.runner.graphs is not None
    assert drive(core, requests) == reference and sum(ahead) > 10
    assert core.runner.graph_stats()["replays"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next"])
def test_launching_a_decode_step_never_waits_for_the_device(family, tiny_model_dir, monkeypatch):
    """Everything a planned-ahead decode step queues (slot updates, a hybrid model's checkpoint saves at each
    completed block and the parks of those its few device rows evict into host RAM, the graph replay, its LM
    head, sampling) leaves the host free while the step before it runs: torch's sync debug mode raises on any
    synchronizing call inside launch_decode."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    config = EngineConfig(model=tiny_model_dir(family), runner=RunnerConfig(device="cuda", dtype="bfloat16"),
                          cache=CacheConfig(block_size=4, checkpoint_pool_size=4),
                          scheduler=SchedulerConfig(max_num_seqs=4))
    core = EngineCore(config, quiet=True)
    launch, save, park = ModelRunner.launch_decode, CheckpointPool.save, HostParkPool.park_checkpoints
    # planned-ahead launches; checkpoints saved and parked inside them
    seen = {"inside": False, "launches": 0, "rows_saved": 0, "rows_parked": 0}

    def strict(self, plan, inputs_from=None):
        if inputs_from is None:  # the first step of a run follows a prompt step: not overlapped
            return launch(self, plan, inputs_from)
        seen["inside"] = True
        seen["launches"] += 1
        torch.cuda.set_sync_debug_mode("error")
        try:
            return launch(self, plan, inputs_from)
        finally:
            torch.cuda.set_sync_debug_mode("default")
            seen["inside"] = False

    def counted_save(self, slot_ids, rows):
        seen["rows_saved"] += len(slot_ids) if seen["inside"] else 0
        return save(self, slot_ids, rows)

    def counted_park(self, pairs):
        seen["rows_parked"] += len(pairs) if seen["inside"] else 0
        return park(self, pairs)

    monkeypatch.setattr(ModelRunner, "launch_decode", strict)
    monkeypatch.setattr(CheckpointPool, "save", counted_save)
    monkeypatch.setattr(HostParkPool, "park_checkpoints", counted_park)
    drive(core, [(0, greedy(30)), (0, greedy(19)), (0, greedy(26)), (3, greedy(40)), (5, greedy(33))])
    assert seen["launches"] > 15
    assert (seen["rows_saved"] > 0) == (family == "qwen3_next")  # a hybrid's completed blocks were checkpointed
    assert (seen["rows_parked"] > 0) == (family == "qwen3_next")  # and older ones parked in host RAM


def test_hybrid_decode_checkpoints_are_saved_ahead_and_serve_the_next_turn(tiny_model_dir, monkeypatch):
    """A hybrid model with prefix caching checkpoints its state at every block its decoding completes.
    The step that completes a block is planned ahead like any other: the save is queued at the start of
    the next step, before that step advances the state. The next turn of the conversation resumes from
    the newest such checkpoint with the output of a cold engine."""
    folder = tiny_model_dir("qwen3_next")

    cached = {}

    first_prompt = prompt(3)                                     # 9 tokens; blocks of 4
    ahead = count_launches(monkeypatch, "launch_decode")
    core = engine(folder, True)
    answer = turn(core, "a", first_prompt, 15, cached)
    assert sum(ahead) >= 12                                      # of 14 decode steps, block ends included
    sync = engine(folder, False)
    assert turn(sync, "a", first_prompt, 15, cached) == answer
    assert core.scheduler.cache_stats.checkpoints_saved == sync.scheduler.cache_stats.checkpoints_saved >= 3
    follow_up = first_prompt + answer + [7, 8, 9]
    resumed = turn(core, "b", follow_up, 6, cached)
    assert cached["b"] > len(first_prompt) + 8                   # resumed inside the first answer
    cold = turn(engine(folder, False), "b", follow_up, 6, cached)
    assert resumed == cold
