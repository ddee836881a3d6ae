"""What a newcomer sees when things go wrong, through real `strata` processes: a bad model spec, a taken
port and a chat with no server each end in one clear line, never a traceback (issue 24, item 9).

The processes are independent and each spends seconds importing and starting, so they all start together
at the first test (the `launched` fixture) and each test reads its own one's result: the module takes about
as long as the longest of them, not their sum."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import pytest

from live_server import ROOT, free_port

UNKNOWN_SHAPE = {"generate": ["--prompt", "hi"], "serve": ["--port", "0"], "chat": []}
CHAT_ON_8080 = "something listens on 127.0.0.1:8080, where `strata chat` looks for a server first"


class Strata:
    """One `strata` process; its output goes to files, so none blocks on a full pipe while another is awaited."""

    def __init__(self, *args: str, stdin: str = "") -> None:
        env = {**os.environ, "PYTHONPATH": ROOT}
        env.pop("STRATA_API_KEY", None)
        self.args = [sys.executable, "-m", "strata.cli.main", *args]
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(self.args, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=self.out,
                                     stderr=self.err, text=True)
        try:
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it exited before reading: its output says why

    def result(self, timeout: float) -> subprocess.CompletedProcess:
        try:
            returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self.out.seek(0)
        self.err.seek(0)
        return subprocess.CompletedProcess(self.args, returncode, self.out.read(), self.err.read())


@dataclass
class Launched:
    processes: dict[str, Strata]
    taken_port: int
    taken_port_result: subprocess.CompletedProcess  # waited for while its port was still taken


def _is_listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def launched():
    chat = not _is_listening(8080)
    processes = {f"unknown shape {command}": Strata(command, "random:doesnotexist", "--device", "cpu", *options)
                 for command, options in UNKNOWN_SHAPE.items() if command != "chat" or chat}
    if chat:
        processes["chat"] = Strata("chat", "--device", "cpu", "--dtype", "float32", "--max-model-len", "256",
                                   "--max-tokens", "4", stdin="Hi\n/quit\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        result = Strata("serve", "--device", "cpu", "--port", str(port)).result(60)
    yield Launched(processes, port, result)
    for process in processes.values():
        if process.proc.poll() is None:
            process.proc.kill()


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("strata: error:")]


@pytest.mark.parametrize("command", list(UNKNOWN_SHAPE))
def test_an_unknown_random_shape_is_one_line(launched, command):
    if f"unknown shape {command}" not in launched.processes:
        pytest.skip(CHAT_ON_8080)
    result = launched.processes[f"unknown shape {command}"].result(120)
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "unknown random shape 'doesnotexist'" in lines[0], result.stderr


def test_a_taken_port_is_reported_before_the_model_loads(launched):
    result, port = launched.taken_port_result, launched.taken_port
    assert result.returncode == 2
    assert error_lines(result) == [f"strata: error: cannot listen on 127.0.0.1:{port} (Address already in use); "
                                   f"is another server running there? stop it or pass --port"]
    assert "loading" not in result.stdout  # refused before the engine process starts


def test_chat_without_a_server_starts_one_and_quits_cleanly(launched):
    """The in-process server stops before the interpreter exits: cut mid-shutdown, its engine process
    died under it and the client reported a crash and a restart on the way out."""
    if "chat" not in launched.processes:
        pytest.skip(CHAT_ON_8080)
    result = launched.processes["chat"].result(240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert error_lines(result) == []
    assert "strata chat" in result.stdout
    assert "exited" not in output and "restarting" not in output and "Error" not in output, output
