"""Verification steps planned ahead (--async-scheduling with synthetic drafts, spec/verify_ahead.py): the next
step is launched before this one is read, planned as if every draft was accepted and moved back on the device.
Outputs equal speculation stepped one step at a time (same drafts, same draws: the accepted counts a step draws
are the drafter's), for a dense model, an MoE and a hybrid model whose recurrent state rolls back by device
indices; requests ending mid-pipeline (max_tokens, a stop id, an abort) and arriving mid-pipeline lose nothing and
leak nothing. Tiny random models, CPU (and CUDA graphs on a GPU)."""

from __future__ import annotations

import pytest
import torch

from strata import SamplingParams
from strata.config import CacheConfig, EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.engine.core import EngineCore
from strata.runner import planned_verification
from strata.types import Request
from engine_driver import count_launches, drive, greedy, prompt, turn

SYNTHETIC = {"method": "synthetic", "num_speculative_tokens": 3, "acceptance_length": 2.5, "adaptive": False}


def engine(folder: str, async_scheduling: bool, device: str = "cpu", speculative: dict | None = SYNTHETIC,
           seed: int = 0, num_blocks: int | None = None, max_model_len: int | None = None,
           hold: int | None = None, dtype: str | None = None) -> EngineCore:
    """speculative=None: plain decoding (the reference of exact drafters); hold: --admission-hold-steps; dtype:
    float32 on the CPU and bfloat16 on a GPU unless given."""
    dtype = dtype or ("float32" if device == "cpu" else "bfloat16")
    config = EngineConfig(model=folder, runner=RunnerConfig(device=device, dtype=dtype, seed=seed),
                          cache=CacheConfig(block_size=4, num_gpu_blocks=num_blocks),
                          scheduler=SchedulerConfig(max_num_seqs=4, async_scheduling=async_scheduling,
                                                    max_model_len=max_model_len, admission_hold_steps=hold),
                          speculative=SpecConfig.from_json(speculative))
    return EngineCore(config, quiet=True)


def assert_released(core: EngineCore) -> None:
    """Nothing held once every request ended: no step left in flight (a benchmark switches options next), every
    block and slot free."""
    assert not core.has_unfinished() and core._ahead is None
    core.set_runtime_options(async_scheduling=True)  # raises while a step is in flight
    assert core.scheduler.allocator.num_free == core.scheduler.allocator.num_blocks
    assert sorted(core.scheduler.free_slots) == list(range(4))


@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "qwen3_next", "qwen4_exp"])
def test_outputs_equal_stepping_one_at_a_time(family, tiny_model_dir, monkeypatch):
    folder = tiny_model_dir(family)
    requests = [(0, greedy(30)), (0, greedy(41)), (0, greedy(23)), (0, SamplingParams(temperature=0.8, max_tokens=37,
                                                                                      ignore_eos=True))]
    reference = drive(engine(folder, False), requests)
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True)
    assert drive(core, requests) == reference
    assert sum(ahead) >= 6, ahead  # most verification steps were queued behind the one before
    stats = core.scheduler.stats.as_dict()
    assert 0 < stats["num_accepted_tokens"] < stats["num_draft_tokens"]  # windows were moved back, and not all
    assert_released(core)


def test_requests_ending_and_arriving_mid_pipeline(tiny_model_dir, monkeypatch):
    """A stop id and an abort end requests whose next step is already queued; a request arriving later stops the
    pipeline (it needs a prompt step) and it starts again after: outputs as stepping one at a time."""
    folder = tiny_model_dir("qwen3_next")
    plain = drive(engine(folder, False), [(0, greedy(40))])["0"][0]
    stop_at = plain[17]
    requests = [(0, greedy(40, stop_token_ids=[stop_at])), (0, greedy(35)), (0, greedy(44)), (9, greedy(20))]
    reference = drive(engine(folder, False), requests, abort={6: "2"})
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True)
    got = drive(core, requests, abort={6: "2"})
    assert got == reference
    assert got["0"][0][-1] == stop_at and len(got["0"][0]) < 40 and len(got["2"][0]) < 44
    assert sum(ahead) >= 4 and not all(ahead)
    assert_released(core)


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_next", "qwen4_exp"])
def test_cuda_graph_windows_moved_on_the_device(family, tiny_model_dir, monkeypatch):
    """On CUDA the windows replay graphs: the bonus tokens are fed and the positions, context lengths and KV slot
    mapping moved by the shortfall inside the graph inputs, never read on the host before the launch; the shift,
    the verdicts and the recurrent states' roll-back (GDN, PLE) replay graphs of their own (runner/verify_graphs.py),
    padding slots among them (three requests in a layout of four)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    folder = tiny_model_dir(family)
    requests = [(0, greedy(40)), (0, greedy(33)), (0, greedy(45)), (3, greedy(20))]
    reference = drive(engine(folder, False, "cuda"), requests)
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True, "cuda")
    assert core.runner.graphs is not None
    assert drive(core, requests) == reference
    stats = core.runner.graph_stats()
    assert sum(ahead) >= 6 and stats["replays"] > 0 and stats["verify_replays"] >= sum(ahead), stats
    assert_released(core)


@pytest.mark.parametrize("family", ["qwen3_next+mtp", "qwen3_5_moe+mtp", "qwen4_exp+mtp"])
def test_mtp_drafts_from_the_device_keep_greedy_output(family, tiny_model_dir, monkeypatch):
    """STRATA_DRAFTS_AHEAD=1: greedy requests verify the MTP head's drafts in steps planned ahead, the head drafting
    the next window from the device's verdicts (pass 1 over the step's rows, one-token passes moved back by the
    shortfall). Output: plain greedy decoding's, and speculation stepped one step at a time's."""
    monkeypatch.setenv("STRATA_DRAFTS_AHEAD", "1")
    folder = tiny_model_dir(family)
    mtp = {"method": "mtp", "num_speculative_tokens": 2, "adaptive": False}


    requests = [(0, greedy(30)), (0, greedy(41)), (0, greedy(23)), (5, greedy(12))]
    plain = drive(engine(folder, False, speculative=None), requests)
    assert drive(engine(folder, False, speculative=mtp), requests) == plain
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True, speculative=mtp)
    assert drive(core, requests) == plain
    assert sum(ahead) >= 6, ahead
    stats = core.scheduler.stats.as_dict()
    assert stats["num_draft_tokens"] > 0
    assert_released(core)


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_suffix_drafts_made_ahead_keep_greedy_output(family, tiny_model_dir, monkeypatch):
    """STRATA_DRAFTS_AHEAD=1 with suffix drafting: each window's drafts are matched on the host when it is launched,
    as if the step in flight accepted its own; greedy output stays plain decoding's, and drafts were accepted."""
    monkeypatch.setenv("STRATA_DRAFTS_AHEAD", "1")
    folder = tiny_model_dir(family)
    suffix = {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}


    requests = [(0, greedy(60)), (0, greedy(47)), (0, greedy(52))]
    plain = drive(engine(folder, False, speculative=None), requests)
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True, speculative=suffix)
    core.scheduler.uniform_draft_windows = True  # as with CUDA graphs: short proposals filled to k (one layout)
    assert drive(core, requests) == plain
    stats = core.scheduler.stats.as_dict()
    assert sum(ahead) >= 6 and stats["num_accepted_tokens"] > 0, (ahead, stats)
    assert_released(core)


def test_sampled_windows_draw_as_stepping_one_at_a_time(tiny_model_dir, monkeypatch):
    """Sampled requests (no seed) beside a greedy one, MTP drafts planned ahead: speculative sampling runs on the
    device with the shared generator, drawing the same numbers in the same order as the step-at-a-time path, so
    the outputs are the same tokens."""
    monkeypatch.setenv("STRATA_DRAFTS_AHEAD", "1")
    folder = tiny_model_dir("qwen3_next+mtp")
    mtp = {"method": "mtp", "num_speculative_tokens": 2, "adaptive": False}


    hot = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=33, ignore_eos=True)
    requests = [(0, hot), (0, greedy(25)), (0, SamplingParams(temperature=1.2, top_k=20, max_tokens=28,
                                                               ignore_eos=True))]
    reference = drive(engine(folder, False, speculative=mtp, seed=3), requests)
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True, speculative=mtp, seed=3)
    assert drive(core, requests) == reference
    assert sum(ahead) >= 6 and core.scheduler.stats.as_dict()["num_draft_tokens"] > 0
    assert_released(core)


def test_partly_right_drafts_move_the_windows_by_what_was_accepted(tiny_model_dir, monkeypatch):
    """A random MTP head's drafts are all rejected; here an oracle stands in for the head's passes (the next tokens
    of plain greedy decoding, one in three spoiled), so windows accept all, some or none of their drafts and the
    next window moves by each: output still plain greedy decoding's, most drafts accepted."""
    monkeypatch.setenv("STRATA_DRAFTS_AHEAD", "1")
    folder = tiny_model_dir("qwen3_next+mtp")
    mtp = {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}


    requests = [(0, greedy(30)), (0, greedy(41)), (0, greedy(23))]
    plain = drive(engine(folder, False, speculative=None), requests)
    sequences = [prompt(i) + plain[str(i)][0] for i in range(len(requests))]
    spoil = iter(torch.randint(0, 3, (10_000,), generator=torch.Generator().manual_seed(0)).tolist())

    def oracle(runner, plan, inputs, hidden, accepted, bonus, shift):
        window, k = plan.scheduled[0].num_new_tokens, plan.scheduled[0].next_k
        moved = (accepted - (window - 1) + (shift if shift is not None else 0)).tolist()
        drafts = []
        for work, m in zip(plan.scheduled, moved):
            history = runner.speculation.drafter.tokens[work.slot_id]
            sequence = next(s for s in sequences if s[:len(history)] == history)
            last = work.num_computed_tokens + window - 1 + m                          # the last accepted position
            ahead = (sequence + [0] * 8)[last + 2:last + 2 + k]
            drafts.append([t if next(spoil) else (t + 1) % 100 for t in ahead])
        return torch.tensor(drafts)

    monkeypatch.setattr(planned_verification, "mtp_drafts", oracle)
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True, speculative=mtp)
    assert drive(core, requests) == plain
    stats = core.scheduler.stats.as_dict()
    assert sum(ahead) >= 6 and stats["num_accepted_tokens"] > stats["num_draft_tokens"] / 3, (ahead, stats)
    assert_released(core)


@pytest.mark.gpu
def test_cuda_mtp_drafts_from_the_device_keep_greedy_output(tiny_model_dir, monkeypatch):
    """STRATA_DRAFTS_AHEAD=1 on CUDA: the windows replay graphs, the MTP passes run eagerly with contexts moved on the
    device (their host lengths stay the planned ones): output as speculation stepped one step at a time (bf16:
    windows and one-token steps may round apart, so not compared with plain decoding here)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    monkeypatch.setenv("STRATA_DRAFTS_AHEAD", "1")
    folder = tiny_model_dir("qwen3_next+mtp")


    requests = [(0, greedy(40)), (0, greedy(33)), (0, greedy(45))]
    mtp = {"method": "mtp", "num_speculative_tokens": 2, "adaptive": False}
    reference = drive(engine(folder, False, "cuda", mtp), requests)
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True, "cuda", mtp)
    assert drive(core, requests) == reference
    stats = core.runner.graph_stats()
    assert sum(ahead) >= 6 and stats["replays"] > 0 and stats["verify_replays"] > 0, stats
    assert_released(core)


def test_sampled_verdicts_equal_verify_rejection():
    """Speculative sampling on the device draws what spec/verify.py's verify_rejection draws from the same
    generator state: the same accepted counts and final tokens, over windows that accept all, some or none."""
    from strata.spec.verify import verify_rejection
    from strata.spec.verify_ahead import sampled_verdicts

    gen = torch.Generator().manual_seed(0)
    num_slots, k, vocab = 24, 3, 50
    probs = torch.softmax(4 * torch.randn(num_slots * (k + 1), vocab, generator=gen), dim=-1)   # peaked rows
    likely = probs.view(num_slots, k + 1, vocab)[:, :k].argmax(dim=-1)                           # [S, k]
    drafts = torch.where(torch.rand(num_slots, k, generator=gen) < 0.75, likely,
                         torch.randint(0, vocab, (num_slots, k), generator=gen))
    expected = verify_rejection(probs, drafts.tolist(), list(range(0, num_slots * (k + 1), k + 1)),
                                shared_generator=torch.Generator().manual_seed(7))
    emitted, accepted, final = sampled_verdicts(probs, drafts, torch.Generator().manual_seed(7))
    got = [(row[:a + 1], a) for row, a in zip(emitted.tolist(), accepted.tolist())]
    assert got == expected
    assert final.tolist() == [tokens[-1] for tokens, _ in expected]
    assert {a for _, a in expected} == {0, 1, 2, 3}


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_uniform_windows_stay_ahead_up_to_a_requests_end(family, tiny_model_dir, monkeypatch):
    """With uniform windows (filler drafts, as CUDA graphs take them) a request near its max_tokens keeps a whole
    window, so the step after one it may end in is still planned ahead (tokens past its end dropped at commit):
    outputs as stepping one at a time with the same windows, and the chain never breaks: a step planned after a
    request ended leaves its slot out."""
    folder = tiny_model_dir(family)
    requests = [(0, greedy(30)), (0, greedy(41)), (0, greedy(23)), (0, greedy(37, stop_token_ids=[7]))]
    stepping = engine(folder, False)
    stepping.scheduler.uniform_draft_windows = True
    reference = drive(stepping, requests)
    launches = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True)
    core.scheduler.uniform_draft_windows = True
    assert drive(core, requests) == reference
    assert [len(reference[str(i)][0]) for i in range(3)] == [30, 41, 23]
    assert launches.count(False) == 1, launches  # the first step only: a request ending does not break the chain
    assert_released(core)


def test_switching_options_drains_a_step_queued_for_requests_that_ended(tiny_model_dir):
    """A caller that steps only while its own requests run (a benchmark's loop) leaves the step planned ahead of
    their last one queued; switching options then finishes it instead of refusing."""
    core = engine(tiny_model_dir("llama"), True)
    core.scheduler.uniform_draft_windows = True
    for i in range(4):
        core.add_request(Request(str(i), prompt(i), greedy(13 + i)))
    while core.scheduler.has_unfinished():
        core.step()
    assert core._ahead is not None and core.has_unfinished()
    core.set_runtime_options(async_scheduling=False)
    assert core._ahead is None and not core.has_unfinished()
    assert_released(core)


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_waiting_requests_that_cannot_enter_yet_keep_the_chain(family, tiny_model_dir, monkeypatch):
    """Requests queued while every slot is taken, and one that --admission-hold-steps keeps out beside a free slot
    (a running request ends within the hold, so both successors' prompts share a step): the verification steps go
    on being planned ahead (a freed slot is refilled a step later). Outputs as stepping one at a time; every
    request is admitted. Uniform windows (as CUDA graphs take them), so requests near their end keep the chain."""
    folder = tiny_model_dir(family)
    requests = [(0, greedy(30)), (0, greedy(33)), (0, greedy(24)), (0, greedy(36)), (0, greedy(20)), (0, greedy(18))]
    stepping = engine(folder, False, hold=3)
    stepping.scheduler.uniform_draft_windows = True
    reference = drive(stepping, requests)
    core = engine(folder, True, hold=3)
    core.scheduler.uniform_draft_windows = True
    launches, launch = [], core.runner.launch_verify

    def recorded(plan, inputs_from=None):
        scheduler = core.scheduler
        launches.append((inputs_from is not None, bool(scheduler.waiting), bool(scheduler.free_slots)))
        return launch(plan, inputs_from)

    monkeypatch.setattr(core.runner, "launch_verify", recorded)
    assert drive(core, requests) == reference
    assert [len(reference[str(i)][0]) for i in range(6)] == [30, 33, 24, 36, 20, 18]
    assert (True, True, False) in launches, launches  # planned ahead while requests queued for a slot
    assert (True, True, True) in launches, launches   # planned ahead while a request was held beside a free slot
    assert_released(core)


@pytest.mark.parametrize("family, device", [("qwen3_next", "cpu"), ("qwen4_exp", "cpu"),
                                            pytest.param("qwen3_next", "cuda", marks=pytest.mark.gpu)])
def test_checkpoints_inside_a_chain_serve_the_next_turn(family, device, tiny_model_dir, monkeypatch):
    """A hybrid model's verification steps planned ahead (suffix drafts, STRATA_DRAFTS_AHEAD=1) checkpoint its
    state where a window starts on a block boundary (known on the device only: the row is reserved when the step
    is planned, saved before its forward if the step before accepted that many drafts, named or freed when the
    host reads that step). The next turn resumes inside the first answer, past where its chain began, with the
    output of a cold engine without speculation; every reserved row is named or freed. (On CUDA in float32: the
    windows replay graphs, the saves run between them.)"""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    monkeypatch.setenv("STRATA_DRAFTS_AHEAD", "1")
    folder = tiny_model_dir(family)
    suffix = {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}
    cached = {}

    first_prompt = prompt(3)
    core = engine(folder, True, device, speculative=suffix, dtype="float32")
    core.scheduler.uniform_draft_windows = True  # (as CUDA graphs take them: the chain runs to the answer's end)
    launches = count_launches(monkeypatch, "launch_verify")
    answer = turn(core, "a", first_prompt, 41, cached)
    assert sum(launches) >= 6 and core.scheduler.cache_stats.checkpoints_saved >= 3, launches
    follow_up = first_prompt + answer + [7, 8, 9]
    resumed = turn(core, "b", follow_up, 12, cached)
    assert cached["b"] > len(first_prompt) + 16, (cached["b"], len(first_prompt))  # inside the first answer
    cold = engine(folder, False, device, speculative=None, dtype="float32")
    assert resumed == turn(cold, "b", follow_up, 12, cached)
    assert not core.scheduler._boundary_rows
    index = core.scheduler.checkpoints
    assert len(index._free) + len(index) == index.capacity


def test_a_short_block_pool_steps_one_at_a_time_where_it_must(tiny_model_dir, monkeypatch):
    """Blocks for both windows are taken before a step is planned ahead: with a pool that cannot hold them for
    every request, those steps wait for the one in flight (or a request is preempted by a step planned the usual
    way), and outputs, blocks and slots come out as stepping one at a time."""
    folder = tiny_model_dir("qwen3_next")
    requests = [(0, greedy(28)), (0, greedy(25)), (0, greedy(22))]
    reference = drive(engine(folder, False, num_blocks=18, max_model_len=40), requests)
    ahead = count_launches(monkeypatch, "launch_verify")
    core = engine(folder, True, num_blocks=18, max_model_len=40)
    assert drive(core, requests) == reference
    assert any(ahead) and not all(ahead)
    assert_released(core)


def test_the_switch_off_steps_one_at_a_time(tiny_model_dir, monkeypatch):
    """STRATA_NO_VERIFY_AHEAD=1 (A/B runs): no verification step is launched behind another; same outputs."""
    folder = tiny_model_dir("llama")
    requests = [(0, greedy(20)), (0, greedy(17))]
    reference = drive(engine(folder, False), requests)
    monkeypatch.setenv("STRATA_NO_VERIFY_AHEAD", "1")
    ahead = count_launches(monkeypatch, "launch_verify")
    assert drive(engine(folder, True), requests) == reference and not ahead
