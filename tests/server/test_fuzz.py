"""schemathesis against the server's own OpenAPI schema finds no 5xx. The engine is the stand-in
process (answers at once), so the run exercises validation, rendering and the response paths fast."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from live_server import API_KEY, fake_app, thread_server


def test_schemathesis_finds_no_server_errors():
    cli = shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    assert cli, "schemathesis is in the test extra: pip install -e '.[test]'"
    with thread_server(fake_app("echo")) as srv:
        run = subprocess.run([cli, "run", srv.base_url + "/openapi.json", "--checks", "not_a_server_error",
                              "--max-examples", "15", "--header", f"Authorization: Bearer {API_KEY}",
                              "--generation-deterministic", "--request-timeout", "20", "--no-color"],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
