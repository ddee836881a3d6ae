"""What a newcomer sees when things go wrong, through real `strata` processes: a bad model spec, a taken
port and a chat with no server each end in one clear line, never a traceback (issue 24, item 9)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from live_server import ROOT, free_port


def strata(*args: str, timeout: float = 120, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("STRATA_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("strata: error:")]


@pytest.mark.parametrize("command", [["generate", "--prompt", "hi"], ["serve", "--port", "0"], ["chat"]],
                         ids=lambda c: c[0])
def test_an_unknown_random_shape_is_one_line(command):
    if command[0] == "chat" and _is_listening(8080):
        pytest.skip("something listens on 127.0.0.1:8080, where `strata chat` looks for a server first")
    result = strata(command[0], "random:doesnotexist", "--device", "cpu", *command[1:])
    assert result.returncode == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "unknown random shape 'doesnotexist'" in lines[0], result.stderr


def test_a_taken_port_is_reported_before_the_model_loads():
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = strata("serve", "--device", "cpu", "--port", str(port), timeout=60)
    assert result.returncode == 2
    assert error_lines(result) == [f"strata: error: cannot listen on 127.0.0.1:{port} (Address already in use); "
                                   f"is another server running there? stop it or pass --port"]
    assert "loading" not in result.stdout  # refused before the engine process starts


def _is_listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_chat_without_a_server_starts_one_and_quits_cleanly():
    """The in-process server stops before the interpreter exits: cut mid-shutdown, its engine process
    died under it and the client reported a crash and a restart on the way out."""
    if _is_listening(8080):
        pytest.skip("something listens on 127.0.0.1:8080, where `strata chat` looks for a server first")
    result = strata("chat", "--device", "cpu", "--dtype", "float32", "--max-model-len", "256", "--max-tokens", "4",
                    stdin="Hi\n/quit\n", timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert error_lines(result) == []
    assert "strata chat" in result.stdout
    assert "exited" not in output and "restarting" not in output and "Error" not in output, output
