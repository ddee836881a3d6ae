"""Sessions on disk in the engine process (strata.engine.sessions), driven as the engine loop drives them:
a save while another request decodes with a step planned ahead, a restore into a fresh engine, and the
fingerprint's view of what makes two engines different."""

from __future__ import annotations

import pytest

from strata.config import CacheConfig, EngineConfig, RunnerConfig
from strata.engine.core import EngineCore
from strata.engine import session_jobs
from strata.engine.session_jobs import SessionJobs
from strata.engine.sessions import FORMAT, SessionError, check_header, fingerprint
from strata.types import Request, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


def new_engine(folder: str, block_size: int = 4, kv_cache_dtype: str = "auto") -> EngineCore:
    return EngineCore(EngineConfig(model=folder, runner=RunnerConfig(device="cpu", dtype="float32"),
                                   cache=CacheConfig(block_size=block_size, kv_cache_dtype=kv_cache_dtype)), quiet=True)


def drive(engine: EngineCore, jobs: SessionJobs, on_step=None) -> tuple[dict[str, list[int]], dict[str, int], list]:
    """The engine loop's order (process._loop): session jobs, then a step -> (tokens and cached prompt
    tokens per request, session replies)."""
    tokens: dict[str, list[int]] = {}
    cached: dict[str, int] = {}
    replies = []
    while engine.has_unfinished() or jobs.busy:
        deltas, done = jobs.run() if jobs.busy else ([], [])
        replies += done
        if engine.has_unfinished():
            deltas += engine.step()
            if on_step is not None:
                on_step()
        for delta in deltas:
            tokens.setdefault(delta.request_id, []).extend(delta.new_token_ids)
            if delta.finished:
                cached[delta.request_id] = delta.num_cached_tokens
    return tokens, cached, replies


@pytest.mark.parametrize("family", ["llama", "qwen3_next", "qwen4_exp"])  # qwen4_exp: PLE states, QSA index keys
def test_a_save_while_another_request_decodes_ahead(tiny_model_dir, tmp_path, family, monkeypatch):
    """With no time for session work between steps, the loop still runs one session step per step: the
    save's copies interleave with the other request's steps and change nothing of its output."""
    monkeypatch.setattr(session_jobs, "LOOP_SLICE_S", 0.0)
    monkeypatch.setattr(session_jobs, "STEP_SHARE", 0.0)
    folder, path = tiny_model_dir(family), str(tmp_path / "conversation")
    prompt = list(range(5, 42))
    engine = new_engine(folder)
    jobs = SessionJobs(engine)
    engine.add_request(Request("first-turn", prompt, GREEDY))
    conversation = prompt + drive(engine, jobs)[0]["first-turn"]
    engine.add_request(Request("busy", list(range(60, 80)), SamplingParams(temperature=0.0, max_tokens=30,
                                                                             ignore_eos=True)))
    submitted, steps_while_saving = [], []

    def save_once_decoding_ahead():
        if not submitted and engine._ahead is not None:
            jobs.submit(1, "save", {"path": path, "token_ids": conversation})
            submitted.append(True)
        elif submitted and jobs.busy:
            steps_while_saving.append(True)

    tokens, _, replies = drive(engine, jobs, save_once_decoding_ahead)
    assert replies[0][1]["ok"] and replies[0][1]["num_tokens"] == 44
    assert len(steps_while_saving) >= 2 * len(engine.runner.kv_pool.caches)  # a copy per step: K, V per layer
    alone = new_engine(folder)
    alone.add_request(Request("busy", list(range(60, 80)), SamplingParams(temperature=0.0, max_tokens=30,
                                                                          ignore_eos=True)))
    assert tokens["busy"] == drive(alone, SessionJobs(alone))[0]["busy"]  # the settle changed nothing

    next_turn = conversation + [7, 8, 9, 10, 11]
    engine.add_request(Request("never-stopped", next_turn, GREEDY))
    expected = drive(engine, jobs)[0]["never-stopped"]
    fresh = new_engine(folder)  # a restore while a request decodes, interleaved with its steps likewise
    fresh_jobs = SessionJobs(fresh)
    fresh.add_request(Request("busy", list(range(60, 80)), SamplingParams(temperature=0.0, max_tokens=30,
                                                                          ignore_eos=True)))

    def restore_once_decoding_ahead():
        if fresh._ahead is not None and not fresh_jobs.busy and not submitted[1:]:
            fresh_jobs.submit(2, "restore", {"path": path})
            submitted.append(True)

    busy_again, _, replies = drive(fresh, fresh_jobs, restore_once_decoding_ahead)
    assert replies[0][1]["num_tokens"] == 44 and replies[0][1]["bytes"] > 0
    assert busy_again["busy"] == tokens["busy"]
    fresh.add_request(Request("restored", next_turn, GREEDY))
    tokens, cached, _ = drive(fresh, fresh_jobs)
    assert tokens["restored"] == expected and cached["restored"] == 44


def test_a_restore_of_a_prefix_already_cached_changes_nothing(tiny_model_dir, tmp_path):
    folder, path = tiny_model_dir("qwen3_next"), str(tmp_path / "s")
    engine = new_engine(folder)
    jobs = SessionJobs(engine)
    prompt = list(range(5, 42))
    engine.add_request(Request("a", prompt, GREEDY))
    drive(engine, jobs)
    free_before = engine.scheduler.allocator.num_free
    jobs.submit(1, "save", {"path": path, "token_ids": prompt})
    assert drive(engine, jobs)[2][0][1]["num_tokens"] == 36
    assert engine.scheduler.allocator.num_free == free_before  # the save let its blocks go
    jobs.submit(2, "restore", {"path": path})
    assert drive(engine, jobs)[2][0][1]["num_tokens"] == 36
    assert engine.scheduler.allocator.num_free == free_before
    engine.add_request(Request("b", prompt + [1, 2, 3], GREEDY))
    assert drive(engine, jobs)[1]["b"] == 36


def save_then_continue(folder: str, path: str, prompt: list[int], kv_cache_dtype: str) -> tuple[EngineCore, list[int]]:
    """An engine with this KV dtype serves `prompt`, saves its session to `path` (36 tokens of blocks), then
    continues it by three tokens -> (the engine, the greedy tokens after prompt + [1, 2, 3])."""
    engine = new_engine(folder, kv_cache_dtype=kv_cache_dtype)
    jobs = SessionJobs(engine)
    engine.add_request(Request("a", prompt, GREEDY))
    drive(engine, jobs)
    jobs.submit(1, "save", {"path": path, "token_ids": prompt})
    assert drive(engine, jobs)[2][0][1]["num_tokens"] == 36
    engine.add_request(Request("never-stopped", prompt + [1, 2, 3], GREEDY))
    return engine, drive(engine, jobs)[0]["never-stopped"]


def restore_fresh(folder: str, path: str, kv_cache_dtype: str) -> tuple[EngineCore, SessionJobs]:
    """A new engine with this KV dtype restores the session at `path` (36 tokens) -> (engine, its jobs)."""
    fresh = new_engine(folder, kv_cache_dtype=kv_cache_dtype)
    fresh_jobs = SessionJobs(fresh)
    fresh_jobs.submit(2, "restore", {"path": path})
    assert drive(fresh, fresh_jobs)[2][0][1]["num_tokens"] == 36
    return fresh, fresh_jobs


def restore_reply_of_a_model_dtype_engine(folder: str, path: str) -> dict:
    """What an engine whose KV is in the model dtype answers to restoring `path`."""
    other = new_engine(folder)
    other_jobs = SessionJobs(other)
    other_jobs.submit(3, "restore", {"path": path})
    return drive(other, other_jobs)[2][0][1]


def test_fp8_kv_saves_and_restores_its_bytes_and_is_refused_by_a_16_bit_cache(tiny_model_dir, tmp_path):
    """A session of an engine with fp8 KV (float8 caches) restores into another such engine with the same next
    tokens; an engine whose KV is in the model dtype refuses the file, naming the cache layout."""
    folder, path = tiny_model_dir("llama"), str(tmp_path / "s")
    prompt = list(range(5, 42))
    _, expected = save_then_continue(folder, path, prompt, "fp8")
    fresh, fresh_jobs = restore_fresh(folder, path, "fp8")
    fresh.add_request(Request("restored", prompt + [1, 2, 3], GREEDY))
    tokens, cached, _ = drive(fresh, fresh_jobs)
    assert tokens["restored"] == expected and cached["restored"] == 36
    reply = restore_reply_of_a_model_dtype_engine(folder, path)
    assert not reply["ok"] and reply["status"] == 409 and "float8" in reply["error"]


def test_the_fingerprint_tells_engines_apart(tiny_model_dir, tmp_path):
    from tiny_models import save_tiny_model

    llama = new_engine(tiny_model_dir("llama"))
    same = fingerprint(llama)
    check_header({"format": FORMAT, "fingerprint": same}, fingerprint(new_engine(tiny_model_dir("llama"))), "f")
    save_tiny_model("llama", str(tmp_path), seed=1)  # the same file name, size and tensors; other weights
    for other, named in ((new_engine(tiny_model_dir("llama"), block_size=8), "block_size"),
                         (new_engine(tiny_model_dir("qwen3")), "architecture"),
                         (new_engine(str(tmp_path)), r"weights\.files")):
        with pytest.raises(SessionError, match=named) as e:
            check_header({"format": FORMAT, "fingerprint": same}, fingerprint(other), "f")
        assert e.value.status == 409
    with pytest.raises(SessionError, match="session format"):
        check_header({"format": "strata-session/0", "fingerprint": same}, same, "f")
