"""schemathesis against the server's own OpenAPI schema finds no 5xx. The engine is the stand-in process
(answers at once), so the run exercises validation, rendering and the response paths fast. The run (about
a minute of schemathesis' own CPU, in its own processes: the CLI and a stand-in-engine server) starts when
the first test of tests/server starts (conftest) and this test, ordered after the other stand-in-engine tests,
waits for its verdict: the minute overlaps those tests instead of adding to them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from live_server import API_KEY, ROOT, free_port, wait_healthy

SERVER_TESTS = os.path.dirname(os.path.abspath(__file__))
SERVE_STAND_IN = ("import sys, uvicorn; from live_server import fake_app; "
                  "uvicorn.run(fake_app('echo'), host='127.0.0.1', port=int(sys.argv[1]), log_level='warning')")


class BackgroundFuzz:
    """A stand-in-engine server in a subprocess and the schemathesis CLI against it, from a thread."""

    def __init__(self) -> None:
        self.base_url = f"http://127.0.0.1:{free_port()}"
        self.log = open(os.path.join(tempfile.mkdtemp(prefix="strata-fuzz-"), "server.log"), "w+")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.dirname(SERVER_TESTS), SERVER_TESTS])}
        self.server = subprocess.Popen([sys.executable, "-c", SERVE_STAND_IN, self.base_url.rsplit(":", 1)[1]],
                                       cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.run: subprocess.CompletedProcess | None = None
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._fuzz, daemon=True)
        self.thread.start()

    def _fuzz(self) -> None:
        cli = shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
        try:
            assert cli, "schemathesis is in the test extra: pip install -e '.[test]'"
            wait_healthy(self.base_url, 120, self.server)
            self.run = subprocess.run([cli, "run", self.base_url + "/openapi.json", "--checks", "not_a_server_error",
                                       "--max-examples", "15", "--header", f"Authorization: Bearer {API_KEY}",
                                       "--generation-deterministic", "--request-timeout", "20", "--no-color"],
                                      capture_output=True, text=True, timeout=600)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def verdict(self) -> tuple[int | None, str]:
        """Waits for the run; (the CLI's exit status or None, what to print when it is not 0)."""
        self.thread.join(720)
        self.stop()
        self.log.seek(0)
        if self.run is None:
            return None, f"{self.error!r}\n{self.log.read()[-4000:]}"
        return self.run.returncode, self.run.stdout[-4000:] + self.run.stderr[-2000:]

    def stop(self) -> None:
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)
            try:
                self.server.wait(20)
            except subprocess.TimeoutExpired:
                self.server.kill()


def test_schemathesis_finds_no_server_errors(background_fuzz):
    returncode, output = background_fuzz.verdict()
    assert returncode == 0, output
