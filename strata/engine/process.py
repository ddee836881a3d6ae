"""The engine-core child process: loads the model, then loops `read messages -> step -> send deltas`.

Owns the device. Talks to the server only in plain data over one multiprocessing connection:
in: ("add", Request) | ("abort", request_id) | ("session", call_id, "save" | "restore", args) | ("shutdown",);
out: ("ready", info) | ("fatal", message) | ("step", [TokenDelta], status) | ("session", call_id, reply).
A "step" message (possibly with no deltas) goes out at least every HEARTBEAT_S while the loop is
alive, so the server can tell a hung engine from an idle one. The process exits when the server's
end of the connection closes.
"""

from __future__ import annotations

import signal
import time
from multiprocessing.connection import Connection

from strata.config import EngineConfig
from strata.types import FinishReason, Request, TokenDelta

HEARTBEAT_S = 0.5
SESSION_POLL_S = 0.001  # while a session job runs, look in on it this often (its steps run between polls)


def run_engine(config: EngineConfig, conn: Connection, quiet: bool = False) -> None:
    """Entry point of the child process (spawn context: everything it needs is imported here)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the server, which shuts us down
    from strata.engine.core import EngineCore

    try:
        engine = EngineCore(config, quiet=quiet)
    except Exception as e:  # a bad model path or option: tell the server why, then exit
        conn.send(("fatal", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", _engine_info(engine)))
    try:
        _loop(engine, conn)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the server went away


def _engine_info(engine) -> dict:
    cfg = engine.model_config
    return {"max_model_len": engine.max_model_len, "vocab_size": cfg.vocab_size, "device": engine.device,
            "dtype": engine.dtype, "architecture": cfg.architecture, "eos_token_ids": list(cfg.eos_token_ids),
            "num_kv_blocks": engine.num_kv_blocks, "status": engine.status()}


def _loop(engine, conn: Connection) -> None:
    from strata.engine.session_jobs import SessionJobs

    last_sent = time.monotonic()
    sessions = SessionJobs(engine)
    while True:
        deltas: list[TokenDelta] = []
        busy = engine.has_unfinished()
        if conn.poll(0 if busy else SESSION_POLL_S if sessions.busy else HEARTBEAT_S):
            while True:
                message = conn.recv()
                if message[0] == "shutdown":
                    if engine.experts is not None:
                        engine.experts.close()  # saves the learned routing profile (atexit never runs here)
                    engine.close()
                    return
                if message[0] == "session":
                    sessions.submit(*message[1:])
                else:
                    deltas.extend(_handle(engine, message))
                if not conn.poll(0):
                    break
        if sessions.busy:
            finished, replies = sessions.run()
            deltas.extend(finished)
            for reply in replies:
                conn.send(("session", *reply))
        if engine.has_unfinished():
            deltas.extend(engine.step())
        now = time.monotonic()
        if deltas or now - last_sent >= HEARTBEAT_S:
            conn.send(("step", deltas, engine.status()))
            last_sent = now


def _handle(engine, message: tuple) -> list[TokenDelta]:
    kind = message[0]
    if kind == "add":
        request: Request = message[1]
        try:
            engine.add_request(request)
        except ValueError as e:  # the server validates first; this is the last line of defence
            return [TokenDelta(request.request_id, [], "", True, FinishReason.ERROR, error=str(e))]
        return []
    if kind == "abort":
        delta = engine.abort_request(message[1])
        return [delta] if delta is not None else []
    raise ValueError(f"unknown engine message {kind!r}")
