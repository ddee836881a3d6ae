"""Sessions on disk over HTTP: a conversation saved on one server, the server stopped, a new one (a new
engine process) restored from the file, and the next turn gives the same greedy tokens with its prefix
read from the cache; files from another model or configuration, damaged files, bad names and missing
files are refused with a 4xx that says which."""

from __future__ import annotations

import contextlib
import os

import pytest

from live_server import API_KEY, fake_app, thread_server
from strata.config import CacheConfig, EngineConfig, RunnerConfig, SchedulerConfig
from strata.server.app import create_app
from strata.server.config import ServerConfig

PROMPT = list(range(5, 42))   # 37 tokens: 9 whole blocks of 4 and a partial one
NEXT_TURN = [7, 8, 9, 10, 11]


def engine_config(folder: str, block_size: int = 4) -> EngineConfig:
    return EngineConfig(model=folder, runner=RunnerConfig(device="cpu", dtype="float32"),
                        cache=CacheConfig(block_size=block_size), scheduler=SchedulerConfig(max_model_len=256))


@contextlib.contextmanager
def serve(folder: str, sessions_dir: str, block_size: int = 4):
    config = ServerConfig(api_key=API_KEY, sessions_dir=sessions_dir, engine_spare="off")
    with thread_server(create_app(engine_config(folder, block_size), config)) as live:
        yield live


def complete(live, model: str, prompt: list[int]) -> tuple[list[int], int]:
    """Greedy token ids of a completion (a tiny model has no tokenizer: its logprobs' tokens are the ids)
    and its cached prompt tokens."""
    r = live.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0,
                                      "ignore_eos": True, "logprobs": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    token_ids = [int(t) for t in body["choices"][0]["logprobs"]["tokens"]]
    return token_ids, body["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_save_restart_restore_continues_as_if_never_stopped(tiny_model_dir, tmp_path, family):
    folder = tiny_model_dir(family)
    with serve(folder, str(tmp_path)) as first:
        reply, _ = complete(first, folder, PROMPT)
        conversation = PROMPT + reply                 # 45 tokens: 11 whole blocks
        saved = first.post("/v1/sessions/save", {"filename": "chat-1.session", "prompt": conversation})
        assert saved.status_code == 200, saved.text
        saved = saved.json()
        assert (saved["n_tokens"], saved["n_saved"]) == (45, 44)
        assert saved["n_written"] == os.path.getsize(tmp_path / "chat-1.session")
        never_stopped = complete(first, folder, conversation + NEXT_TURN)
    assert never_stopped[1] == 44
    with serve(folder, str(tmp_path)) as second:
        restored = second.post("/v1/sessions/restore", {"filename": "chat-1.session"})
        assert restored.status_code == 200, restored.text
        assert restored.json()["n_restored"] == 44
        assert restored.json()["n_read"] == saved["n_written"]
        assert complete(second, folder, conversation + NEXT_TURN) == never_stopped


def test_refused_files_and_names(tiny_model_dir, tmp_path):
    """One server; the files it must refuse are written in-process by engines of another model and of
    another block size (real fingerprints), and one is damaged."""
    from strata.engine.core import EngineCore
    from strata.engine.session_jobs import SessionJobs
    from strata.types import Request, SamplingParams

    llama = tiny_model_dir("llama")
    for name, folder, block_size in (("other-model", tiny_model_dir("qwen3"), 4), ("other-blocks", llama, 8)):
        engine = EngineCore(engine_config(folder, block_size), quiet=True)
        engine.add_request(Request("r", PROMPT, SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)))
        while engine.has_unfinished():
            engine.step()
        jobs = SessionJobs(engine)
        jobs.submit(0, "save", {"path": str(tmp_path / name), "token_ids": PROMPT})
        while jobs.busy:
            jobs.run()
    with open(tmp_path / "other-model", "rb") as f:
        (tmp_path / "damaged").write_bytes(f.read()[:-100])
    with serve(llama, str(tmp_path)) as live:

        def restore(filename: str):
            r = live.post("/v1/sessions/restore", {"filename": filename})
            return r.status_code, r.json()["error"]["message"]

        status, message = restore("other-model")
        assert status == 409 and "architecture (file: 'Qwen3ForCausalLM', this server: 'LlamaForCausalLM')" in message
        status, message = restore("other-blocks")
        assert status == 409 and "block_size (file: 8, this server: 4)" in message
        status, message = restore("damaged")
        assert status == 400 and "damaged" in message
        status, message = restore("never-saved")
        assert status == 404 and "'never-saved'" in message
        for bad in ("../other-model", "a/b", ".hidden", "", "x" * 129, "tab\tname"):
            for path, body in (("/v1/sessions/restore", {}), ("/v1/sessions/save", {"prompt": PROMPT})):
                r = live.post(path, {"filename": bad, **body})
                assert r.status_code == 400 and r.json()["error"]["param"] == "filename", (bad, r.text)
        r = live.post("/v1/sessions/save", {"filename": "nothing", "prompt": [3, 3, 3, 3, 3, 3]})
        assert r.status_code == 404 and "nothing of this conversation is in the prefix cache" in r.text
        r = live.post("/v1/sessions/save", {"filename": "both", "prompt": PROMPT, "messages": [
            {"role": "user", "content": "hi"}]})
        assert r.status_code == 400 and "either messages" in r.text
        assert sorted(os.listdir(tmp_path)) == ["damaged", "other-blocks", "other-model"]


def test_sessions_are_off_without_a_sessions_dir():
    with thread_server(fake_app()) as live:
        r = live.post("/v1/sessions/save", {"filename": "a", "prompt": "hello"})
        assert r.status_code == 400 and "--sessions-dir" in r.json()["error"]["message"]


def test_an_engine_that_dies_during_a_save_fails_it_with_a_503(tmp_path):
    with thread_server(fake_app("die_on_session", sessions_dir=str(tmp_path), engine_spare="off")) as live:
        r = live.post("/v1/sessions/save", {"filename": "a", "prompt": "hello"})
        assert r.status_code == 503 and "engine" in r.json()["error"]["message"]
