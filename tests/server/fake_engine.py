"""A stand-in engine process for tests that exercise the server's plumbing, not the model: it speaks
the engine protocol of strata/engine/process.py, answers every request with a few fixed tokens at
once, and can be told to hang or die on a request. Starts in well under a second."""

from __future__ import annotations

import os
import time

from strata.types import FinishReason, TokenDelta

INFO = {"max_model_len": 2048, "vocab_size": 49152, "device": "fake", "dtype": "none", "architecture": "Fake",
        "eos_token_ids": [2], "num_kv_blocks": 128,
        "status": {"max_num_seqs": 4, "num_running": 0, "num_waiting": 0, "num_free_slots": 4,
                   "kv_blocks_total": 128, "kv_blocks_free": 128}}


TOOL_OUTPUT = ["<thi", "nk>need the weather</think>\n\n", "<tool_call>\n{\"name\": \"get_weather\", ",
               "\"arguments\": {\"city\": \"Paris\"}}\n</tool", "_call>"]


def _answer(request_id: str, n: int, pieces: list[str]) -> list[TokenDelta]:
    last = len(pieces) - 1
    return [TokenDelta(request_id, [42 + i], piece, i == last, FinishReason.STOP if i == last else None,
                       num_prompt_tokens=n) for i, piece in enumerate(pieces)]


def run_fake_engine(config, conn, quiet=True, mode="echo"):
    """mode: echo (answer "Hi there" at once) | tool (a Qwen-style thinking + tool-call answer, split
    mid-tag) | hang (stop responding on a request) | die (exit after one token) | crash (exit on a request
    before any output) | die_on_session (exit when asked for a session save or restore)."""
    conn.send(("ready", INFO))
    while True:
        if not conn.poll(0.2):
            conn.send(("step", [], INFO["status"]))
            continue
        message = conn.recv()
        if message[0] == "shutdown":
            return
        if message[0] == "session" and mode == "die_on_session":
            os._exit(1)
        if message[0] != "add":
            continue
        request = message[1]
        n = len(request.prompt_token_ids)
        if mode == "hang":
            time.sleep(3600)
        if mode == "crash":
            os._exit(1)
        if mode == "die":
            conn.send(("step", [TokenDelta(request.request_id, [42], "Hi", num_prompt_tokens=n)], INFO["status"]))
            time.sleep(0.3)
            os._exit(1)
        if mode == "tool":
            for delta in _answer(request.request_id, n, TOOL_OUTPUT):
                conn.send(("step", [delta], INFO["status"]))
            continue
        deltas = [TokenDelta(request.request_id, [42], "Hi", num_prompt_tokens=n),
                  TokenDelta(request.request_id, [43], " there", True, FinishReason.LENGTH, num_prompt_tokens=n)]
        conn.send(("step", deltas, INFO["status"]))
